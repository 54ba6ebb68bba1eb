# Appends to every sub-benchmark line its throughput relative to the "bare"
# sub-benchmark of the same parent measured in the same run:
#   BenchmarkGin/replay-2  500000  2400 ns/op  ...   0.42x bare
# so that figures are read as ratios against a baseline, not as timings.
# A new package starts with no baselines: a "bare" of another package's
# benchmark of the same name is not this one's.
/^pkg: / { delete base }
{
	line = $0
	if ($1 ~ /^Benchmark/ && $4 == "ns/op") {
		name = $1
		sub(/-[0-9]+$/, "", name)
		parent = name
		sub(/\/[^\/]*$/, "", parent)
		leaf = substr(name, length(parent) + 2)
		if (leaf == "bare") {
			base[parent] = $3
		} else if (parent in base && $3 > 0) {
			# Two significant digits below 0.1x: a case 300 times slower
			# than its baseline reads 0.0033x, not 0.00x.
			r = base[parent] / $3
			line = sprintf(r < 0.1 ? "%s\t%.2gx bare" : "%s\t%.2fx bare", line, r)
		}
	}
	print line
}
