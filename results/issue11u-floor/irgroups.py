"""Group one replay's instructions by what CPython (or a library) spends them on.

    cg_annotate --threshold=0 DIFF > all.txt   # DIFF: cg_diff of a 0-replay and an N-replay cachegrind run
    python irgroups.py all.txt REQUEST_REPLAYS  # e.g. 9000 = 3 replays x 3000 requests
"""
import collections
import re
import sys

tot, groups = 0, collections.Counter()
for line in open(sys.argv[1]):
    m = re.match(r"\s*(-?[\d,]+) \(\s*-?[\d.]+%\)\s+(\S.*)$", line)
    if not m or "PROGRAM TOTALS" in line:
        continue
    v, name = int(m.group(1).replace(",", "")), m.group(2)
    if "ceval.c" in name or "Include/object.h:_PyEval" in name:
        g = "bytecode loop (ceval)"
    elif "dictobject.c" in name:
        g = "dict operations"
    elif "memset" in name or "memmove" in name or "memcpy" in name:
        g = "memset/memcpy (dict tables on resize/rebuild, allocations)"
    elif any(s in name for s in ("obmalloc", "gcmodule", "object.c:_Py_NewReference", "tupleobject", "listobject")):
        g = "object alloc/free, tuples, lists"
    elif "longobject" in name or "floatobject" in name:
        g = "int/float objects (128-bit key hashes, boxing)"
    elif any(s in name for s in ("bltinmodule", "itertoolsmodule", "_collectionsmodule")):
        g = "map/zip/filter/islice/deque"
    elif any(s in name for s in ("call.c", "methodobject", "descrobject", "funcobject", "frame.c", "typeobject",
                                 "classobject")):
        g = "calls (C and Python frames), attribute lookup"
    elif "pytime" in name or "timemodule" in name or "clock_gettime" in name:
        g = "perf_counter"
    elif "???" in name:
        g = "numpy / other libraries (no symbols)"
    else:
        g = "other CPython (long tail)"
    groups[g] += v
    tot += v
n = int(sys.argv[2])
for g, v in groups.most_common():
    print(f"{v / tot * 100:5.1f}%  {v / n:9.0f} Ir/request  {g}")
print(f"total {tot / n:.0f} Ir/request")
