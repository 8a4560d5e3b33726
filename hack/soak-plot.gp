# Plots the manager's RSS during the last `make soak` (bin/soak/rss.tsv)
# with its faults (bin/soak/faults-minutes.tsv) as docs/soak-rss.png:
# `make soak-plot`.
set terminal pngcairo size 960,400 font "sans,10"
set output "docs/soak-rss.png"
set datafile separator "\t"
stats "bin/soak/rss.tsv" every ::1 using 2 nooutput
top = STATS_max * 1.75
set grid
set title "turnlog manager RSS during make soak (2 shared cores); gray: faults"
set xlabel "minutes since the load began"
set ylabel "MiB"
set yrange [0:top]
set key bottom right
plot "bin/soak/rss.tsv" every ::1 using ($1/60):2 with lines lw 2 title "RSS, sampled every 5 s", \
     "bin/soak/faults-minutes.tsv" every ::1 using 1:(STATS_max * 1.1) with impulses lc "gray" dt 2 notitle, \
     "bin/soak/faults-minutes.tsv" every ::1 using 1:(STATS_max * 1.11):2 with labels rotate by 90 left font "sans,7" notitle
