"""What every benchmark shares: the contenders (queues), the machine's description, child
processes and CPU attackers, statistics, argument types and output files."""
