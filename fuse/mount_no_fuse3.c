/* The mount in a build without libfuse3. Built instead of mount_fuse3.c, so
 * that include/ptc/mount.h is the same in every build. */
#include "ptc/mount.h"

int ptc_mount_run(ptc_view *view, const char *mountpoint, const ptc_mount_options *opts)
{
    (void)view, (void)mountpoint, (void)opts;
    return ptc_error_set(PTC_E_UNSUPPORTED, "this build of ptc has no FUSE support");
}
