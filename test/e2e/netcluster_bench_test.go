//go:build docker

package e2e

import (
	"fmt"
	"net"
	"strconv"
	"testing"
	"time"

	"github.com/hatchery/hatchery/internal/testutil/dockertest"
)

// The figures of many hosts (`make bench`, not CI), on the namespace
// cluster (internal/testutil/netcluster): each host a network namespace
// with its own Docker Engine and agent. Run with -benchtime 1x: one
// iteration is a whole measurement.

// BenchmarkNetClusterHostLossUnderLoad: the demo on 3 hosts (web ×6, 2 on
// each host; kv on one), 8 keep-alive clients on each ingress of the two
// hosts that will stay; the host without kv is lost (link down, agent
// killed, engine stopped). Reports the time from the loss until every
// request through the others' ingresses succeeds again (the end of the
// last one that failed or lacked kv's count; 0 if none did), bound 5 s,
// and until web's 6 replicas are ready on the others in the control
// plane's view (through the liveness timeout and the reschedule), bound
// 15 s, each with its ratio to the bound.
func BenchmarkNetClusterHostLossUnderLoad(b *testing.B) {
	for range b.N {
		c, _, kv := startNetDemo(b)
		all := []*clAgent{c.agents["h1"], c.agents["h2"], c.agents["h3"]}
		for _, a := range all {
			c.demoPageWithVisits(a)
		}
		lost, others := hostWithoutKv(all, c.agentOf(kv.Labels))
		loss := c.loseDemoHostUnderLoad(lost, others, 6)
		b.Logf("host %s lost: %s", lost.name, describeAsks(loss.asks))
		b.ReportMetric(loss.servingAgain.Seconds(), "serving-again-s")
		b.ReportMetric(loss.servingAgain.Seconds()/hostLossServingBound.Seconds(), "serving-again/bound")
		b.ReportMetric(loss.healthyElsewhere.Seconds(), "healthy-elsewhere-s")
		b.ReportMetric(loss.healthyElsewhere.Seconds()/hostLossHealthyBound.Seconds(), "healthy-elsewhere/bound")
		b.ReportMetric(float64(len(loss.asks)), "requests")
		b.ReportMetric(float64(len(failedAsks(loss.asks, true))), "failed-requests")
	}
	b.ReportMetric(0, "ns/op") // an iteration is a cluster's life: its time says nothing
}

// The mesh's targets: the p99 it adds at 500 requests a second, and the
// share of direct's throughput it keeps at 8 connections.
const (
	meshAddedP99Bound    = time.Millisecond
	meshThroughputTarget = 0.5
)

// meshBenchPort is the port the mesh benchmark's egg publishes on every
// host (each host's namespace has its own ports).
const meshBenchPort = 9080

// meshBenchEnv runs one replica of the test app on a cluster of 2 hosts,
// its HTTP port published, and returns two paths from the test (in the
// root namespace) to that replica: direct, to its own host's published port
// over that host's veth; and through the mesh, to the other host's
// published port over its veth, whose ingress has no replica and streams
// each connection through the mesh to the replica's host. The difference is
// what the mesh costs: the extra hop between the hosts, TLS, HTTP/2. The
// agents converge on a 30 s timer, as ingressBenchEnv's does.
func meshBenchEnv(b *testing.B) ingressPaths {
	b.Helper()
	c := newCluster(b, clusterOptions{hosts: 2, convergeInterval: 30 * time.Second})
	dir := netSpreadProject(b, "meshbench", 1, fmt.Sprintf("    ports: [\"%d:8080\"]\n", meshBenchPort))
	c.mustHatch(nil, "apply", "-f", dir+"/hatch.yaml", "--yes")
	var replica, consumer *clAgent
	for _, a := range []*clAgent{c.agents["h1"], c.agents["h2"]} {
		if len(c.eggContainersOn(a, "meshbench", false)) == 1 {
			replica = a
		} else {
			consumer = a
		}
	}
	if replica == nil || consumer == nil {
		b.Fatal("want the replica on one host and none on the other")
	}
	var p ingressPaths
	p[pathDirect].name, p[pathDirect].url = "direct", "http://"+net.JoinHostPort(replica.ip, strconv.Itoa(meshBenchPort))+"/version"
	p[pathVia].name, p[pathVia].url = "mesh", "http://"+net.JoinHostPort(consumer.ip, strconv.Itoa(meshBenchPort))+"/version"
	client := benchClient(b, 1)
	for _, path := range p {
		dockertest.Eventually(b, time.Minute, 200*time.Millisecond, func() error {
			_, err := send(client, "GET", path.url, "", "")
			return err
		})
	}
	b.Logf("replica on %s; direct %s, mesh %s (through %s)", replica.name, p[pathDirect].url, p[pathVia].url, consumer.name)
	return p
}

// BenchmarkNetClusterMeshAgainstDirect: on meshBenchEnv's paths, in the
// same run, BenchmarkIngressAddedLatencyAt500RPS's measurement (500
// requests a second on each of direct and mesh, interleaved; target: added
// p99 ≤ 1 ms) and BenchmarkIngressSaturationThroughput's (8 connections,
// each sending its next request as soon as the last is answered; target:
// mesh/direct ≥ 0.5), each with its ratio to the target.
func BenchmarkNetClusterMeshAgainstDirect(b *testing.B) {
	paths := meshBenchEnv(b)
	latency := measureAddedLatency(b, paths, 500)
	throughput := measureThroughput(b, paths)
	latency.report(b)
	throughput.report(b)
	b.ReportMetric(float64(latency.addedP99())/float64(meshAddedP99Bound), "added-p99/bound")
	b.ReportMetric(throughput.ratio()/meshThroughputTarget, "mesh/direct/target")
}
