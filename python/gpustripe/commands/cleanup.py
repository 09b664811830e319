"""gpustripe cleanup: the shared memory that killed gpustripe processes left in /dev/shm
(emulated device memory, job and team segments): only this user's, only of processes that
no longer run. The next gpustripe job removes them by itself; this lists or removes them
now."""
import json


def register(sub):
    p = sub.add_parser("cleanup", help="list or remove /dev/shm segments left by gpustripe processes that died")
    p.add_argument("--dry-run", action="store_true", help="list them, remove nothing")
    p.add_argument("--json", action="store_true", help="machine-readable output")
    p.add_argument("--shm-dir", default="/dev/shm", help="where POSIX shared memory lives (default /dev/shm)")
    p.set_defaults(func=run)


def run(args):
    from .. import dead_segments, format_size, reclaim_dead_segments

    rows = dead_segments(args.shm_dir) if args.dry_run else reclaim_dead_segments(args.shm_dir)
    if args.json:
        print(json.dumps({"removed": not args.dry_run, "segments": rows}, indent=2))
        return 0
    verb = "would remove" if args.dry_run else "removed"
    for s in rows:
        print(f"{verb} {s['name']} ({format_size(s['bytes'])}, pid {s['pid']} is gone)")
    print(f"{verb} {len(rows)} segments, {format_size(sum(s['bytes'] for s in rows))} in all")
    return 0
