"""The chaos suite behind bench/chaos.py, a module a concept:

budgets     the time limits of every wait, and the wait
console     the lines the harness prints
stack       one `agent-memory up` under test: start, pids, clients, stop
faults      kill, SIGTERM and SIGSTOP of a process of the stack, and their end
burst       turns recorded through the API, retried as a client would
observe     what Valkey, Postgres, the logs and the dead-letter queues hold
report      a scenario's row, its tally and the table
scenario    what a scenario is given and the steps scenarios share
outages     the scenarios of a process killed or stopped mid-burst
compaction  the compaction chain that the compaction workers' faults meet
invalid     invalid events published onto `turns`
replay      `agent-memory dlq replay` of valid and invalid dead letters
"""
