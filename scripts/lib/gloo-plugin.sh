# The one build of the Gloo backend plugin for the scripts (source it from the repository root):
# scripts/test.sh, the suites (through scripts/lib/suite.sh), scripts/main-job.sh and
# scripts/torchrun-check.sh. The installed package builds its own through the top-level CMake
# (40-cmake-package), the wheel its own with zig (build-wheel.sh).
#   gloo_plugin_build [LOG]   configure and build backends/gloo into target/gloo-plugin (output to
#                             LOG, default /dev/null); a no-op build when it is current
#   gloo_plugin               build it when missing and print its path
gloo_plugin_build() {
  local log=${1:-/dev/null}
  [ "$log" = /dev/null ] || mkdir -p "$(dirname "$log")"
  cmake -S backends/gloo -B target/gloo-plugin -DCMAKE_BUILD_TYPE=RelWithDebInfo >"$log" 2>&1 \
    && cmake --build target/gloo-plugin -j 2 >>"$log" 2>&1
}

gloo_plugin() {
  local plugin=$PWD/target/gloo-plugin/libmcore_init_gloo.so
  [ -f "$plugin" ] || gloo_plugin_build
  echo "$plugin"
}
