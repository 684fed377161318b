// Package faultnet injects network faults in userspace, where netem and
// iptables are not available: a TCP proxy (Proxy) whose mode a test or a
// chaos run switches at run time on live connections — pass, delay, drop,
// blackhole — and a gossip proxy (GossipProxy) that forwards a replica's
// memberlist traffic, UDP and TCP, and can drop what comes from chosen
// peers, partitioning gossip between two replicas.
//
// It owns those proxies' goroutines and sockets, nothing else: what to
// break and when is the caller's (internal/tools/chaos/faults), which processes
// sit behind a proxy is internal/tools/localcluster's.
package faultnet
