# Shared by the suites of scripts/test.d: source it from a suite, which then runs in the
# repository root.
#   suite_check NAME CMD...   run CMD; count a pass, or a failure (printed with NAME)
#   gloo_plugin               build the Gloo plugin once (target/gloo-plugin) and print its path
#   suite_end NAME            print "NAME: P passed, F failed" and return non-zero on a failure
cd "$(dirname "${BASH_SOURCE[0]}")/../.." || exit 1
suite_pass=0
suite_fail=0

suite_check() {
  local name=$1; shift
  if "$@"; then suite_pass=$((suite_pass + 1)); else suite_fail=$((suite_fail + 1)); echo "FAIL: $name"; fi
}

gloo_plugin() {
  local plugin=$PWD/target/gloo-plugin/libmcore_init_gloo.so
  if [ ! -f "$plugin" ]; then
    cmake -S backends/gloo -B target/gloo-plugin -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null \
      && cmake --build target/gloo-plugin -j 2 >/dev/null
  fi
  echo "$plugin"
}

suite_end() {
  echo "$1: $suite_pass passed, $suite_fail failed"
  [ "$suite_fail" -eq 0 ]
}
