#!/bin/bash
# Install and start time of the README command from a fresh clone of REV (docs/shared-lab.md):
#   scripts/measure_install.sh NAME REV  ->  $TMPDIR/normlab-install/NAME/result.json
set -u
repo=$(git -C "$(dirname "$0")" rev-parse --show-toplevel)
name=$1; rev=$2; dir=${TMPDIR:-/tmp}/normlab-install/$name
rm -rf $dir; mkdir -p $dir
git clone -q "$repo" $dir/src && git -C $dir/src checkout -q $rev
cd $dir/src
t0=$(date +%s.%N)
python3 -m venv .venv && . .venv/bin/activate
t1=$(date +%s.%N)
pip install -q torch==2.13.0 > $dir/pip-torch.log 2>&1
t2=$(date +%s.%N)
pip install -q ./client . > $dir/pip-project.log 2>&1
t3=$(date +%s.%N)
npk=$(pip list 2>/dev/null | tail -n +3 | wc -l)
port=$((20000 + RANDOM % 20000))
s0=$(date +%s.%N)
NORMLAB_DATA_DIR=$dir/data timeout 300 normlab up --port $port > $dir/up.log 2>&1 &
pid=$!
while ! grep -q "running at" $dir/up.log; do sleep 0.2; if ! kill -0 $pid 2>/dev/null; then break; fi; done
s1=$(date +%s.%N)
kill -INT $pid; sleep 3; kill -9 $pid 2>/dev/null
echo "{\"name\": \"$name\", \"rev\": \"$rev\", \"venv_s\": $(echo "$t1-$t0"|bc), \"torch_s\": $(echo "$t2-$t1"|bc), \"project_s\": $(echo "$t3-$t2"|bc), \"packages\": $npk, \"url_s\": $(echo "$s1-$s0"|bc), \"load_before\": \"$(cut -d' ' -f1-3 /proc/loadavg)\"}" > $dir/result.json
cat $dir/result.json
