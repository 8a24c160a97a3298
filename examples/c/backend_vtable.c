/* A communicator backend written in C: fill in mcore_backend_v1 and register it by pointer.
 * This one only knows single-rank groups; a real backend (see backends/gloo) rendezvous through
 * the mcore_backend_store it receives. Shows the checks registration makes. */
#include "mcore_init.h"
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int finalized = 0;

static int32_t solo_create_group(void *user_data, const mcore_backend_group_info *group,
                                 const mcore_backend_store *store, void **out_comm) {
    (void)user_data;
    (void)store;
    if (group->group_size != 1) return MCORE_STATUS_UNSUPPORTED;
    int64_t *comm = malloc(sizeof *comm);
    if (comm == NULL) return MCORE_STATUS_BACKEND;
    *comm = group->global_rank;
    *out_comm = comm;
    return MCORE_STATUS_OK;
}

static int32_t solo_destroy(void *user_data, void *comm) {
    (void)user_data;
    free(comm);
    return MCORE_STATUS_OK;
}

static void solo_finalize(void *user_data) { *(int *)user_data = 1; }

static int expect(mcore_status got, mcore_status want, const char *what) {
    if (got == want) return 0;
    fprintf(stderr, "%s: got %s, want %s (%s)\n", what, mcore_status_str(got), mcore_status_str(want),
            mcore_last_error_message());
    return 1;
}

int main(void) {
    mcore_backend_v1 vt;
    memset(&vt, 0, sizeof vt); /* unsupported slots stay NULL */
    vt.struct_size = sizeof vt;
    vt.abi_version = MCORE_BACKEND_ABI_VERSION_V1;
    vt.name = "solo-c";
    vt.user_data = &finalized;
    vt.create_group = solo_create_group;
    vt.destroy_comm = solo_destroy;
    vt.finalize = solo_finalize;

    int bad = 0;
    bad += expect(mcore_backend_register(&vt), MCORE_STATUS_OK, "register");
    bad += expect(mcore_backend_register(&vt), MCORE_STATUS_ALREADY_EXISTS, "register twice");

    mcore_backend_v1 old = vt;
    old.name = "solo-c-v2";
    old.abi_version = 2;
    bad += expect(mcore_backend_register(&old), MCORE_STATUS_UNSUPPORTED, "other abi_version");
    if (strstr(mcore_last_error_message(), "abi_version 2") == NULL) bad++;

    bad += expect(mcore_backend_load_plugin("libm.so.6", NULL, 0, NULL), MCORE_STATUS_LIBRARY_LOAD,
                  "plugin without entry symbol");
    if (strstr(mcore_last_error_message(), "mcore_backend_plugin_v1") == NULL) bad++;

    bad += expect(mcore_backend_unregister("solo-c"), MCORE_STATUS_OK, "unregister");
    if (!finalized) {
        fprintf(stderr, "finalize was not called\n");
        bad++;
    }
    bad += expect(mcore_backend_unregister("solo-c"), MCORE_STATUS_NOT_FOUND, "unregister twice");
    if (bad) return 1;
    printf("backend vtable v1: %u bytes, registered, checked and finalized\n", vt.struct_size);
    return 0;
}
