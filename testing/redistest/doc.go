// Package redistest starts real redis-server processes for tests. It
// decides that a test which needs Redis never shares the system Redis (port
// 6379) or another test's server, and that a fault test gets the real fault
// instead of a mock. A standalone server (Start), a master watched by a
// Sentinel (StartSentinel) or a three-master Redis Cluster (StartCluster;
// StartClusterAsync forms it while the tests before a parallel test run;
// StartClusterWithReplicas gives each master a replica, for failover
// tests) runs on free loopback ports, with no persistence and its own temporary
// directory, and is stopped and reaped when the test ends; StartProcess
// starts a standalone server for a program that is not a test, and
// StartProcessHandle one that program can also kill, pause and restart (the
// demo's -redis-fault); StartClusterProcess and
// StartClusterProcessWithReplicas start a cluster for such a program
// (bench/cmd/fleetacc's -cluster, bench's make bench-cluster), its nodes
// Processes. A SharedCluster is one cluster for every test of a test
// binary that never changes the cluster itself and keeps to keys of its
// own: started by the first such test, stopped by TestMain (Run), so that
// only the tests that inject faults, flush or move slots pay the 2 s a
// cluster takes to form.
//
// # Faults
//
// Kill (SIGKILL), Pause and Resume (SIGSTOP, SIGCONT) and Restart (a new
// process on the same port with empty data and an empty script cache) are
// what a fault test injects. Every wait is bounded: a server that does not
// answer PING within the start timeout (WithStartTimeout) fails the test
// with its own log output.
//
// # Requirements
//
// redis-server and redis-cli must be on PATH; when they are missing the test
// fails with a message that names `make deps`, which installs them.
package redistest
