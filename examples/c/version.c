/* Smallest use of the C ABI: the header and the library agree on the ABI version. */
#include "mcore_init.h"
#include <stdio.h>
#include <string.h>

int main(void) {
    if (mcore_abi_version() != MCORE_ABI_VERSION) {
        fprintf(stderr, "ABI mismatch: header %d, library %u\n", MCORE_ABI_VERSION, mcore_abi_version());
        return 1;
    }
    if (strcmp(mcore_version_string(), MCORE_VERSION_STRING) != 0) {
        fprintf(stderr, "version mismatch: header %s, library %s\n", MCORE_VERSION_STRING, mcore_version_string());
        return 1;
    }
    if (strcmp(mcore_status_str(MCORE_STATUS_TIMEOUT), "timed out") != 0) return 1;
    printf("mcore_init %s, ABI %u\n", mcore_version_string(), mcore_abi_version());
    return 0;
}
