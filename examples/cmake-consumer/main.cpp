// Links McoreInit::mcore_init found with find_package and checks header/library agreement.
#include <mcore_init.h>

#include <cstdio>
#include <cstring>

int main() {
    if (mcore_abi_version() != MCORE_ABI_VERSION) {
        std::fprintf(stderr, "ABI mismatch: header %d, library %u\n", MCORE_ABI_VERSION, mcore_abi_version());
        return 1;
    }
    if (std::strcmp(mcore_version_string(), MCORE_VERSION_STRING) != 0) {
        std::fprintf(stderr, "version mismatch: %s vs %s\n", mcore_version_string(), MCORE_VERSION_STRING);
        return 1;
    }
    std::printf("consumer linked mcore_init %s\n", mcore_version_string());
    return 0;
}
