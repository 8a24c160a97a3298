# pytest_summary NAME LOG RC: print the tail of a pytest log and "NAME: P passed, F failed"
# (a non-zero RC without counted failures counts as one); returns RC's truth.
pytest_summary() {
  local name=$1 log=$2 rc=$3 summary passed failed
  tail -n 40 "$log"
  summary=$(tail -n 1 "$log")
  passed=$(grep -o '[0-9]\+ passed' <<<"$summary" | grep -o '[0-9]\+' || echo 0)
  failed=$(( $(grep -o '[0-9]\+ failed' <<<"$summary" | grep -o '[0-9]\+' || echo 0) + $(grep -o '[0-9]\+ error' <<<"$summary" | grep -o '[0-9]\+' || echo 0) ))
  if [ "$rc" -ne 0 ] && [ "$failed" -eq 0 ]; then failed=1; fi
  echo "$name: $passed passed, $failed failed${4:+ ($4)}"
  [ "$rc" -eq 0 ]
}
