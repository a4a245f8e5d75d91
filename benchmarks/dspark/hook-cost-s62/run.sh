#!/bin/bash
# Before (a8570bb) and after (73b7e72, /tmp/after) the engine-core hook changes, one after the other, on this machine.
cd /work/hookcost62
for case in "--landing 0.0" "--landing 0.5" "--scenario order_extraction"; do
  for n in 64 256; do
    for side in before after; do
      root=$([ $side = before ] && echo /tmp/before || echo /tmp/after)
      echo "== $side $n $case" >> results.txt
      (cd $root && PYTHONPATH=$root/engine:$root /work/main/.venv/bin/python -m studies.hook_cost --requests $n --steps 200 $case 2>/dev/null | grep -A9 "requests of") >> results.txt
    done
  done
done
echo done >> results.txt
