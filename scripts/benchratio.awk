# Appends to every sub-benchmark line its throughput relative to the "bare"
# sub-benchmark of the same parent measured in the same run:
#   BenchmarkGin/replay-2  500000  2400 ns/op  ...   0.42x bare
# so that figures are read as ratios against a baseline, not as timings.
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
			line = sprintf("%s\t%.2fx bare", line, base[parent] / $3)
		}
	}
	print line
}
