"""``rdmaq bench serve``: ``vllm serve`` per queue, one step per module: the run plan (plan), the
server (server), the load generator (client), CPU attackers (attack) and confinement (confine),
the queue's share of a step (steptime in the server, steps here), the report and plot (report);
the model it serves (tiny_llama); the command line (options), the servers' launch (launch), one
client run (measure), the sweep (sweep).  The entry point: main."""
