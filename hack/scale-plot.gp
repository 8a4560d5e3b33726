# Plots docs/scale.tsv (written by `make scale-plot` from the results of
# `make bench-scale`) as docs/scale.png: manager memory and times vs Sessions.
set terminal pngcairo size 960,420 font "sans,10"
set output "docs/scale.png"
set datafile separator "\t"
set grid
set multiplot layout 1,2 title "turnlog manager, local workers, file:// store (2 shared cores)"
set xlabel "Sessions"
set ylabel "MiB"
set yrange [0:*]
set title "memory (RSS from /proc)"
set key bottom right
plot "docs/scale.tsv" using 1:2 with linespoints lw 2 title "idle, all Ready", \
     "" using 1:3 with linespoints lw 2 title "peak", \
     "" using 1:4 with linespoints lw 2 title "after restart", \
     256 with lines dt 2 lc "red" title "goal 256 MiB"
set ylabel "seconds"
set title "time"
set key top left
plot "docs/scale.tsv" using 1:5 with linespoints lw 2 title "first start: all Ready", \
     "" using 1:6 with linespoints lw 2 title "restart: all reconciled", \
     60 with lines dt 2 lc "red" title "restart goal 60 s"
unset multiplot
