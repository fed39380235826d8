//go:build !unix

package memstore_test

func cpuTime() int64 { return -1 }
