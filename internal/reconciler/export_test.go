package reconciler

// SetFIFO switches r's priority of ready operations to readiness order (first
// ready, first started), for the benchmarks that measure what critical-path
// priority buys. Tests only.
func SetFIFO(r *Reconciler, on bool) { r.fifo = on }
