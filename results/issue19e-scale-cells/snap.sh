#!/bin/bash
# snap.sh COMMIT: a copy of the branch at COMMIT in /tmp/19e/snap-COMMIT (for WT_SNAP); prints its path
c=$(git -C /work/wt-19e rev-parse --short "$1") && d=/tmp/19e/snap-$c && mkdir -p $d &&
  git -C /work/wt-19e archive $c | tar -x -C $d && echo $d
