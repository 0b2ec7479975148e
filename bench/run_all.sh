#!/usr/bin/env bash
# Every benchmark in sequence, on a machine with nothing else running. Each prints its figures and saves them
# under bench/results/. About 25 minutes on 2 cores. Needs wrk (apt-get install wrk) and the dev extras.
set -euo pipefail
cd "$(dirname "$0")/.."
export PYTHONPATH=.
python3 bench/decide_bench.py
python3 bench/rest_overhead_bench.py
python3 bench/governed_call_bench.py
python3 bench/limits_bench.py
python3 bench/governance_replay_bench.py
python3 bench/approvals_bench.py
python3 bench/mcp_bench.py
python3 bench/upstreams_bench.py
python3 bench/startup_bench.py
python3 bench/memory_store_search.py --synthetic-vectors
python3 bench/embed_bench.py
python3 bench/locomo_eval.py
python3 bench/precedents_bench.py
python3 bench/replication_bench.py
python3 bench/agent_bench.py
# The sampling profile needs ptrace: root, or a kernel.yama.ptrace_scope of 0.
if [ "$(id -u)" = 0 ]; then python3 bench/profile_governed.py; fi
