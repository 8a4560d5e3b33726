# Plots the manager's RSS and the backlog (Sessions not Current) during the
# last `make soak` (dir/rss.tsv) with
# its faults (dir/faults-minutes.tsv) as out: `make soak-plot`, which
# passes SOAK_OUT as dir and SOAK_PLOT as out.
if (!exists("dir")) dir = "bin/soak"
if (!exists("out")) out = "docs/soak-rss.png"
rss = dir."/rss.tsv"
faults = dir."/faults-minutes.tsv"
set terminal pngcairo size 960,400 font "sans,10"
set output out
set datafile separator "\t"
stats rss every ::1 using 2 nooutput
top = STATS_max * 1.75
set grid
set title "turnlog manager RSS and backlog during make soak (2 shared cores); gray: faults"
set xlabel "minutes since the load began"
set ylabel "MiB"
set yrange [0:top]
set key bottom right
set y2label "Sessions not Current"
set y2tics
set ytics nomirror
set y2range [0:*]
plot rss every ::1 using ($1/60):2 with lines lw 2 title "RSS, sampled every 5 s", \
     rss every ::1 using ($1/60):4 axes x1y2 with lines lw 1 lc "dark-orange" title "backlog (right axis)", \
     faults every ::1 using 1:(STATS_max * 1.1) with impulses lc "gray" dt 2 notitle, \
     faults every ::1 using 1:(STATS_max * 1.11):2 with labels rotate by 90 left font "sans,7" notitle
