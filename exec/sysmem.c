/* sysmem.c - how much memory a run may still take: the kernel's MemAvailable
 * and, inside a container or a CI runner, the memory cgroup's limit.
 *
 * A process under a cgroup memory limit is OOM-killed when the cgroup's
 * usage reaches it, however much the machine has free; so `carve run` asks
 * here before allocating.  Both cgroup versions are read:
 *   v2: /proc/self/cgroup "0::/PATH", files memory.max ("max" = none),
 *       memory.current and memory.stat (inactive_file);
 *   v1: "N:...memory...:/PATH", files memory.limit_in_bytes (>= 2^60 = none),
 *       memory.usage_in_bytes and memory.stat (total_inactive_file).
 * The cgroup's folder is PATH under the mount (/sys/fs/cgroup, or
 * /sys/fs/cgroup/unified beside v1, or /sys/fs/cgroup/memory for v1), or the mount itself when a container shows its own
 * cgroup as the root; every ancestor up to the mount is read too, since the
 * kernel enforces each.  What is left under a limit is limit - usage +
 * inactive file pages (the kernel reclaims those first).  Everything is read
 * under a root folder so tests can give a fake /proc and /sys.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "exec/runtime.h"

#define NO_LIMIT ((unsigned long long)1 << 60)

/* The first number in file root/dir/name (or after `key ` when key is not
 * NULL); 0 when absent.  "max" reads as NO_LIMIT. */
static unsigned long long read_num(const char *dir, const char *name, const char *key)
{
    char path[2200], line[256];
    if ((size_t)snprintf(path, sizeof path, "%s/%s", dir, name) >= sizeof path) return 0;
    FILE *f = fopen(path, "r");
    if (!f) return 0;
    unsigned long long v = 0;
    size_t kl = key ? strlen(key) : 0;
    while (fgets(line, sizeof line, f)) {
        if (key && (strncmp(line, key, kl) || line[kl] != ' ')) continue;
        const char *p = line + (key ? kl + 1 : 0);
        v = !strncmp(p, "max", 3) ? NO_LIMIT : strtoull(p, NULL, 10);
        break;
    }
    fclose(f);
    return v;
}

static int is_dir(const char *p)
{
    struct stat st;
    return stat(p, &st) == 0 && S_ISDIR(st.st_mode);
}

/* Smallest room left under the limits of dir and its ancestors up to mount
 * (v2 when v2, else v1 files); NO_LIMIT when none.  *where gets the folder
 * whose limit binds and *limit that limit. */
static unsigned long long cgroup_room(const char *mount, const char *dir, int v2, char *where, size_t n,
                                      unsigned long long *limit)
{
    char d[2048];
    snprintf(d, sizeof d, "%s", dir);
    unsigned long long best = NO_LIMIT;
    size_t ml = strlen(mount);
    for (;;) {
        unsigned long long lim = read_num(d, v2 ? "memory.max" : "memory.limit_in_bytes", NULL);
        if (lim && lim < NO_LIMIT) {
            unsigned long long use = read_num(d, v2 ? "memory.current" : "memory.usage_in_bytes", NULL);
            unsigned long long cache = read_num(d, "memory.stat", v2 ? "inactive_file" : "total_inactive_file");
            unsigned long long used = use > cache ? use - cache : 0, room = lim > used ? lim - used : 0;
            if (room < best) {
                best = room;
                *limit = lim;
                snprintf(where, n, "%s", d);
            }
        }
        char *slash = strrchr(d, '/');
        if (strlen(d) <= ml || !slash || (size_t)(slash - d) < ml) break;
        *slash = 0;
    }
    return best;
}

/* The cgroup limit that binds (v2, then v1); NO_LIMIT when none. */
static unsigned long long cgroup_available(const char *root, char *why, size_t n)
{
    char path[1024], line[1024], mount[1024], dir[2048], where[2048] = "";
    unsigned long long best = NO_LIMIT, limit = 0;
    snprintf(path, sizeof path, "%s/proc/self/cgroup", root);
    FILE *f = fopen(path, "r");
    if (!f) return NO_LIMIT;
    while (fgets(line, sizeof line, f)) {
        line[strcspn(line, "\n")] = 0;
        char *c1 = strchr(line, ':'), *c2 = c1 ? strchr(c1 + 1, ':') : NULL;
        if (!c2) continue;
        *c1 = *c2 = 0;
        const char *ctl = c1 + 1, *cg = c2 + 1;
        int v2 = !strcmp(line, "0") && !*ctl, v1 = 0;
        for (const char *p = ctl; !v2 && (p = strstr(p, "memory")); p += 6)
            v1 |= (p == ctl || p[-1] == ',') && (p[6] == 0 || p[6] == ',');
        if (!v1 && !v2) continue;
        /* v2 alone is mounted at /sys/fs/cgroup; beside v1 (hybrid) at .../unified */
        snprintf(mount, sizeof mount, "%s/sys/fs/cgroup%s", root, v2 ? "/unified" : "/memory");
        if (v2 && !is_dir(mount)) snprintf(mount, sizeof mount, "%s/sys/fs/cgroup", root);
        snprintf(dir, sizeof dir, "%s%s", mount, strcmp(cg, "/") ? cg : "");
        if (!is_dir(dir)) snprintf(dir, sizeof dir, "%s", mount); /* a container's own cgroup is the root */
        unsigned long long lim = 0, room = cgroup_room(mount, dir, v2, where, sizeof where, &lim);
        if (room < best) {
            best = room;
            limit = lim;
            snprintf(why, n, "the cgroup %s memory limit of %.2f GiB (%s) leaves", v2 ? "v2" : "v1",
                     (double)limit / 1073741824.0, where);
        }
    }
    fclose(f);
    return best;
}

size_t exec_memory_available_at(const char *root, char *why, size_t n)
{
    char path[1024], line[256];
    unsigned long long kb = 0;
    snprintf(path, sizeof path, "%s/proc/meminfo", root);
    FILE *f = fopen(path, "r");
    if (f) {
        while (fgets(line, sizeof line, f))
            if (sscanf(line, "MemAvailable: %llu kB", &kb) == 1) break;
        fclose(f);
    }
    unsigned long long avail = kb ? kb * 1024 : NO_LIMIT;
    snprintf(why, n, "this machine has");
    char cg_why[2300];
    unsigned long long cg = cgroup_available(root, cg_why, sizeof cg_why);
    if (cg < avail) {
        avail = cg;
        snprintf(why, n, "%s", cg_why);
    }
    return avail >= NO_LIMIT ? 0 : (size_t)avail;
}

size_t exec_memory_available(char *why, size_t n) { return exec_memory_available_at("", why, n); }
