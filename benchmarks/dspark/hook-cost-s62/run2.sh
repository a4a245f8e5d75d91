#!/bin/bash
# Drafting under a grammar (half the requests land every draft), before (a8570bb) and after (69d9fd5), one after the other.
cd /work/hookcost62
for n in 64 256; do
  for side in before after; do
    root=/tmp/$side
    echo "== $side $n --scenario order_extraction --landing 0.5" >> results2.txt
    (cd $root && PYTHONPATH=$root/engine:$root /work/main/.venv/bin/python -m studies.hook_cost --requests $n --steps 120 --scenario order_extraction --landing 0.5 2>/dev/null | grep -A9 "requests of") >> results2.txt
  done
done
echo done >> results2.txt
