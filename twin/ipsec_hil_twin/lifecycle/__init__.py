"""ipsec_hil_twin.lifecycle: a lab's life from its lab file: build and tear down (lab), each
host's files (labfiles), the supervisor that keeps it while in use (supervisor). It sits
above what it starts -- the engine, the FreeBSD commands, the faults -- and on machinery's
processes, namespaces and run directories."""
