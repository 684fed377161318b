// Package awake tells how long this process has actually been running,
// as opposed to how much wall time has passed, so that the replica's
// liveness detectors judge their peer, not the scheduler.
//
// A detector that declares a peer dead or a watch stalled after d of
// silence measures d on the wall clock. When the process itself gets no
// CPU (a SIGSTOP, CFS throttling under a CPU limit, a noisy neighbour, a
// long pause), the silence it then sees is its own: the peer's answer is
// in a socket buffer, unread. A Clock notices such starvation, from its
// own ticks arriving late (the process frozen or throttled) and from the
// runtime's scheduling latencies (the CPUs taken by more runnable
// goroutines than they can run: one woken by the network waits its
// turn), and Since subtracts it: a detector asking "how long have I been
// waiting, awake?" gets the time it could have heard an answer in. A 2s
// freeze of the process then moves no detector by 2s.
//
// The package owns the Clock and its metrics; it does not decide what a
// detector does. A nil *Clock is the wall clock, so packages can take one
// optionally.
package awake
