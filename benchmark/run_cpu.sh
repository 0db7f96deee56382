#!/usr/bin/env bash
# Regenerate every CPU-scale benchmark result (tiny models; 10-word Twenty Questions, Guess My City, Overcooked, VirtualHome) into
# benchmark/results/. About 9.5 hours on 2 cores. Finished runs under runs/benchmark/ are skipped, so an interrupted run continues;
# delete runs/benchmark/ to start over. Extra arguments go to benchmark/online.py (e.g. --seeds 1 2 3 --jobs 4).
set -euo pipefail
cd "$(dirname "$0")/.."
python benchmark/online.py "$@"        # ArCHer Fig. 3 in miniature: 5 methods x 3 seeds, 320 episodes each
python benchmark/online.py --budget 1024 --eval-every-episodes 128 --methods archer chai filtered_bc ppo_token \
    --threads 1 --out runs/benchmark/online_1024  # docs/benchmark.md's comparison: 4 methods x 3 seeds, 1,024 episodes (~1.8 h)
python benchmark/online.py --env guess_my_city --bc-steps 1600 --seeds 1 \
    --out runs/benchmark/online_gmc  # the same on Guess My City, seed 1 (~1.5 h: CHAI's runs are the longest)
python benchmark/offline_table.py      # ArCHer Table 1 in miniature: 6 rows, seeds 1-2 (REINFORCE rows: seed 1)
python benchmark/poad_ntpo.py --variants poad ntpo poad_base_lm poad_gamma088   # POAD vs NTPO, 20Q (~25 min)
for env in overcooked_tomato_salad virtualhome_food_preparation; do  # POAD Fig. 3 in miniature (~10 min each)
    python benchmark/poad_ntpo.py --env "$env" --out "runs/benchmark/poad_$env"
done
python benchmark/poad_ntpo.py --tiny-vocab 400 --budget 192 \
    --out runs/benchmark/poad_long   # the action-length ablation, ~8 tokens per question (~1.5 h)
# Q-SFT Table 1 in miniature, seeds 1-2, one thread per run (~1.6 h in all)
python benchmark/offline_qsft.py --games twenty_questions_subset chess_endgame --jobs 2 --extra "--torch-threads 1"
python benchmark/offline_qsft.py --games wordle_small --steps 3000 --out runs/benchmark/qsft3000 --jobs 2 \
    --extra "--torch-threads 1"
python experiments/throughput.py       # rollout path vs bare generate (a probe that imports the scripts)
python benchmark/timing.py             # seconds per iteration per algorithm, through the command line
python benchmark/tokenizer_copy.py --out benchmark/results/tokenizer_copy.md  # issue 55's lever 1, every env
python benchmark/report.py             # -> benchmark/results/{results.md,online*_curves.png,*.csv,*.md}
python benchmark/defaults.py || echo "a default run misses the bar: benchmark/results/defaults.md"  # ~1 h, alone
python -m pytest -q -m slow -n 0      # the slow test tier: the long learning runs, one process (README, "Tests")
