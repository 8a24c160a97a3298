# The counts scripts/test.sh adds up into its last line, "N passed, N failed" (source it).
#   log_counts cargo LOG RC   cargo test's log: the sum of its "test result:" lines; a non-zero RC
#                             without a counted failure (a test binary that crashed) is one failure
#   log_counts suite LOG RC   a suite's log: its last "NAME: P passed, F failed" line (scripts/lib/
#                             suite.sh prints it); none (the suite died first) is one failure, so is
#                             a non-zero RC without a counted failure
# Each prints "P F".
log_counts() {
  local kind=$1 log=$2 rc=$3 counts
  if [ "$kind" = cargo ]; then
    counts=$(awk '/^test result:/ { for (i = 2; i <= NF; i++) { if ($i == "passed;") p += $(i - 1); if ($i == "failed;") f += $(i - 1) }; n++ }
                  END { if (n) print p + 0, f + 0 }' "$log" 2>/dev/null)
  else
    counts=$(grep -E '^[^ ].*: [0-9]+ passed, [0-9]+ failed' "$log" 2>/dev/null | tail -n 1 \
      | sed -E 's/.*: ([0-9]+) passed, ([0-9]+) failed.*/\1 \2/')
  fi
  [ -n "$counts" ] || counts="0 1"
  local p=${counts% *} f=${counts#* }
  if [ "$rc" -ne 0 ] && [ "$f" -eq 0 ]; then f=1; fi
  echo "$p $f"
}
