"""``rdmaq bench step``: a TP step's barrier on one machine, the engine and the ranks as processes
(proc), the figures (report).  The entry point: main."""
