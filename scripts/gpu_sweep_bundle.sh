#!/usr/bin/env bash
# What scripts/gpu_sweep_scale.sh needs on a bare device host that the host lacks (checked 2026-12-01 on
# nvidia-h200: Python 3.12 with numpy, numba, llvmlite, attrs, pluggy, click, matplotlib; no ray, cattrs,
# docstring-parser, copier, filelock >= 4.3): ray 2.60, spfcore's dependencies, and wheels of spfcore and
# the plugins of this tree. Built here (registry access), carried in groups small enough for one device call each
# (a call carries the checkout, ~25 MB, plus at most 64 MiB in all).
#   bash scripts/gpu_sweep_bundle.sh            # -> .gpu/r1 .gpu/r2 .gpu/r3 (ray's wheel in parts), .gpu/rd
# Device calls, back to back (the host keeps /tmp for 30 s after a call):
#   carry [".gpu/r1"]  `mkdir -p /tmp/b && cp -r .gpu/r1 /tmp/b/`          (the same for r2, r3)
#   carry [".gpu/rd"]  `cp -r .gpu/rd /tmp/b/ && bash /tmp/b/rd/install.sh /tmp/b && <the run>`
set -euo pipefail
cd "$(dirname "$0")/.."
G=.gpu
EX=$(git rev-parse --path-format=absolute --git-path info/exclude)  # (in a worktree .git is a file)
mkdir -p "$(dirname "$EX")"
grep -qx "/.gpu/" "$EX" 2>/dev/null || echo /.gpu/ >> "$EX"
rm -rf "$G/r1" "$G/r2" "$G/r3" "$G/rd" "$G/dl-ray"
mkdir -p "$G/dl-ray" "$G/rd"
plat=""
for n in 17 24 26 27 28 29 30 31 32 33 34 35 36 37 38 39; do plat="$plat --platform manylinux_2_${n}_x86_64"; done
# ray and spfcore's own dependencies (pyproject.toml), for the host's CPython 3.12 (those it has are skipped there)
mapfile -t DEPS < <(python3 -c "import tomllib; print('\n'.join(tomllib.load(open('pyproject.toml', 'rb'))['project']['dependencies']))")
python3 -m pip download -q --only-binary=:all: --python-version 3.12 --implementation cp $plat \
  --platform manylinux2014_x86_64 --platform any -d "$G/dl-ray" "ray==2.60.0" "${DEPS[@]}"
VENV_PY=${PYTHON:-.venv/bin/python}
"$VENV_PY" -m pip wheel -q --no-deps --no-build-isolation -w "$G/rd" . plugins/*
RW=$(ls "$G"/dl-ray/ray-*.whl)
( cd "$G/dl-ray" && sha256sum "$(basename "$RW")" ) > "$G/rd/ray.sha256"
split -b 27M -d -a 1 "$RW" "$G/dl-ray/rpart_"
i=1
for p in "$G"/dl-ray/rpart_*; do mkdir -p "$G/r$i"; mv "$p" "$G/r$i/"; i=$((i + 1)); done
# the host has these (and versions that satisfy spfcore): leave them out, or the group passes 64 MiB
HAS='^(numpy|numba|llvmlite|matplotlib|pillow|fonttools|kiwisolver|contourpy|pyparsing|cycler|python_dateutil|six|attrs|pluggy|click|tqdm|rich|pygments|markdown_it_py|mdurl|packaging|typing_extensions)-'
for w in "$G"/dl-ray/*.whl; do
  b=$(basename "$w")
  [ "$w" = "$RW" ] || echo "$b" | grep -Eiq "$HAS" || cp "$w" "$G/rd/"
done
cat > "$G/rd/install.sh" <<'SH'
#!/usr/bin/env bash
# On the device: join ray's parts (BUNDLE/r*/rpart_*), check them, install what the host lacks, offline.
set -euo pipefail
B="$1"; D="$B/rd"; T=$(mktemp -d)
name=$(awk '{print $2}' "$D/ray.sha256")
cat $(ls "$B"/r[0-9]*/rpart_* | sort) > "$T/$name"
( cd "$T" && sha256sum -c "$D/ray.sha256" )
python3 -m pip install -q --no-index --find-links "$D" "$T/$name" "$D"/spfcore*.whl
rm -rf "$T"
python3 -c "import ray, cattrs, spfcore; print('ray', ray.__version__, 'spfcore', spfcore.__file__)"
SH
rm -rf "$G/dl-ray"
du -sh "$G"/r[0-9] "$G/rd"
