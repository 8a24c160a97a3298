/* The public header must compile as strict C11 and survive being included twice. */
#include <mcore_init.h>
#include <mcore_init.h>

int mcore_header_c11_probe(void);

int mcore_header_c11_probe(void) {
    enum mcore_status s = MCORE_STATUS_OK;
    return (int)s + (int)(MCORE_ABI_VERSION - MCORE_ABI_VERSION);
}
