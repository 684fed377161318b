// Package procstat reads what the process itself has used, for the load
// tool's and the benchmarks' figures.
package procstat
