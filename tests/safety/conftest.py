"""The safety modules' shared fixture ``vlab``: one virtual lab per module (the project's
lab factory, tests/lab_factory.py), seeded with an operator's files (_lab.seed)."""

from lab_factory import lab_fixture
from safety._lab import seed

vlab = lab_fixture(name="vlab", prepare=seed)
