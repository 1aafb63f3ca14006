import json, os
# Regenerates the x-*.json cases beside this script: python3 gen_extra_cases.py
OUT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "policy")
Z2 = [{"zone": "z1", "region": "r1"}, {"zone": "z2", "region": "r1"}]
CZ = [{"prefix": "10.1.0.0/16", "zone": "z1"}, {"prefix": "10.2.0.0/16", "zone": "z2"}]
C1, C2 = "10.1.0.1", "10.2.0.1"
def b(name, zone="z1", **kw):
    d = {"name": name, "zone": zone}; d.update(kw); return d
def sc(name, source, service, backends, steps, **top):
    d = {"name": name, "source": source}
    d["zones"] = top.pop("zones", Z2); d["client_zones"] = top.pop("client_zones", CZ)
    d.update(top); d["service"] = service; d["backends"] = backends; d["steps"] = steps
    with open(os.path.join(OUT, name + ".json"), "w") as f:
        json.dump(d, f, indent=1); f.write("\n")
def st(expect, client=C1, **kw):
    d = dict(kw); d["client"] = client; d["expect"] = expect; return d
E = lambda *n: {"eligible": list(n)}
DROP = {"drop": True}

P4 = [b("p1"), b("p2"), b("p3", "z2"), b("p4", "z2"), b("f1", failover=True), b("f2", "z2", failover=True)]
sc("x-fo-h-equals-r", "spec/backend-selection.md: h == r stays on primaries", {"failover_ratio": 0.5}, P4, [
    st(E("p1", "p2", "p3", "p4")),
    st(E("p1", "p2"), set={"p3": {"healthy": False}, "p4": {"healthy": False}}),
    st(E("f1", "f2"), set={"p2": {"healthy": False}}),
])
sc("x-fo-r0", "spec/backend-selection.md: r = 0 fails over only when no primary is healthy", {"failover_ratio": 0.0}, P4, [
    st(E("p1"), set={"p2": {"healthy": False}, "p3": {"healthy": False}, "p4": {"healthy": False}}),
    st(E("f1", "f2"), set={"p1": {"healthy": False}}),
    st(E("p1", "p2", "p3", "p4"), set={"f1": {"healthy": False}, "f2": {"healthy": False}}),
])
sc("x-fo-r1", "spec/backend-selection.md: r = 1 fails over on any unhealthy primary; no healthy failover -> healthy primaries (docs/semantics.md)", {"failover_ratio": 1.0}, P4, [
    st(E("p1", "p2", "p3", "p4")),
    st(E("f1", "f2"), set={"p4": {"healthy": False}}),
    st(E("p1", "p2", "p3"), set={"f1": {"healthy": False}, "f2": {"healthy": False}}),
])
TEN = [b("a%d" % i) for i in range(1, 6)] + [b("b%d" % i, "z2", healthy=(i <= 3)) for i in range(1, 6)]
sc("x-za-spill-ratio-equal", "spec/zonal-affinity.md: ratio == spillover_ratio -> I", {"zonal_affinity": "ZONAL_AFFINITY_SPILL_CROSS_ZONE", "spillover_ratio": 0.6}, TEN, [
    st(E("b1", "b2", "b3"), client=C2),
    st(E("a1", "a2", "a3", "a4", "a5"), client=C1),
])
sc("x-za-spill-ratio-1", "spec/zonal-affinity.md ratio examples: 1.0", {"zonal_affinity": "ZONAL_AFFINITY_SPILL_CROSS_ZONE", "spillover_ratio": 1.0}, TEN, [
    st(E("a1", "a2", "a3", "a4", "a5"), client=C1),
    st(E("a1", "a2", "a3", "a4", "a5", "b1", "b2", "b3"), client=C2),
    st(E("b1", "b2", "b3", "b4", "b5"), client=C2, set={"b4": {"healthy": True}, "b5": {"healthy": True}}),
])
FO = [b("pA"), b("pB", "z2"), b("fA", failover=True, healthy=False), b("fA2", failover=True, healthy=False), b("fB", "z2", failover=True)]
sc("x-za-stay-failover-row", "spec/zonal-affinity.md STAY table row 2: healthy failover -> I, else C", {"zonal_affinity": "ZONAL_AFFINITY_STAY_WITHIN_ZONE", "failover_ratio": 0.0}, FO, [
    st(E("pA")),
    st(E("fA", "fA2"), set={"pA": {"healthy": False}, "pB": {"healthy": False}}),
    st(E("fA"), set={"fA": {"healthy": True}}),
    st(E("fB"), client=C2),
])
LR = [b("p1"), b("p2"), b("p3", "z2"), b("f1", failover=True)]
allbad = {"p1": {"healthy": False}, "p2": {"healthy": False}, "p3": {"healthy": False}, "f1": {"healthy": False}}
sc("x-za-stay-last-resort-row", "spec/zonal-affinity.md STAY table row 3: all unhealthy primaries -> in-zone (I = C)", {"zonal_affinity": "ZONAL_AFFINITY_STAY_WITHIN_ZONE", "failover_ratio": 0.5}, LR, [
    st(E("p1", "p2"), set=allbad), st(E("p3"), client=C2), st(E("p1", "p2", "p3"), client="192.0.2.1"),
])
sc("x-za-spill-last-resort-seed", "spec/zonal-affinity.md note: SPILL in the last-resort case follows the seed (I = C, ratio 1.0)", {"zonal_affinity": "ZONAL_AFFINITY_SPILL_CROSS_ZONE", "spillover_ratio": 0.9, "failover_ratio": 0.5}, LR, [
    st(E("p1", "p2"), set=allbad), st(E("p3"), client=C2),
])
sc("x-za-after-priority", "docs/semantics.md: zonal affinity runs after priority tiers; B = configured primaries of A's priority", {"zonal_affinity": "ZONAL_AFFINITY_STAY_WITHIN_ZONE"},
   [b("hi", "z2", priority=1), b("lo", "z1", priority=2)], [
    st(E("hi")), st(E("lo"), set={"hi": {"healthy": False}}),
])
sc("x-single-backend", "spec/backend-selection.md: single backend, healthy or last resort", {}, [b("only")], [
    st({"eligible": ["only"], "shares": {"only": 1.0}}),
    st(E("only"), set={"only": {"healthy": False}}),
])
sc("x-no-backends", "empty service: nothing to send to", {}, [], [st(DROP)])
sc("x-all-disabled", "spec/origin-routing.md: disabled backends are never available; all disabled -> drop (docs/semantics.md)", {},
   [b("a", enabled=False), b("b", "z2", enabled=False)], [st(DROP), st(E("b"), set={"b": {"enabled": True, "healthy": False}})])
sc("x-priorities-1-5", "spec/origin-routing.md priority fallthrough", {},
   [b("p%d" % i, priority=i) for i in range(1, 6)], [
    st(E("p1")),
    st(E("p2"), set={"p1": {"healthy": False}}),
    st(E("p3"), set={"p2": {"healthy": False}}),
    st(E("p4"), set={"p3": {"healthy": False}}),
    st(E("p5"), set={"p4": {"healthy": False}}),
    st(E("p1"), set={"p5": {"healthy": False}}),
    st(E("p2"), set={"p2": {"healthy": True}}),
])
Z3 = [{"zone": "z1", "region": "r1"}, {"zone": "z2", "region": "r1"}, {"zone": "y1", "region": "r2"}, {"zone": "w1", "region": "r3"}]
ISO_B = [b("a1", "z1", healthy=False), b("a2", "z2", healthy=False), b("c1", "y1"), b("d1", "w1")]
iso_top = dict(zones=Z3, forwarder={"zone": "z1", "region": "r1"}, rtt_ms={"z1": {"z2": 1, "y1": 60, "w1": 20}})
sc("x-iso-nearest-by-rtt", "spec/service-lb-policy.md NEAREST: next region by RTT", {"isolation_granularity": "REGION"}, ISO_B, [
    st(E("d1")), st(E("c1"), set={"d1": {"healthy": False}}), st(E("a1"), set={"a1": {"healthy": True}}),
], **iso_top)
sc("x-iso-strict", "spec/service-lb-policy.md STRICT: only the nearest region", {"isolation_granularity": "REGION", "isolation_mode": "STRICT"}, ISO_B, [
    st(DROP), st(E("a1"), set={"a1": {"healthy": True}}),
], **iso_top)
sc("x-iso-vs-zonal", "docs/semantics.md: isolation keeps what STAY_WITHIN_ZONE chose in the forwarder's region", {"isolation_granularity": "REGION", "isolation_mode": "STRICT", "zonal_affinity": "ZONAL_AFFINITY_STAY_WITHIN_ZONE"},
   [b("a1", "z1", healthy=False), b("a2", "z2"), b("c1", "y1")], [st(E("a1")), st(E("a2"), client=C2), st(E("a2"), client="192.0.2.9")], **iso_top)
sc("x-latency-0", "spec/origin-routing.md: sensitivity 0 keeps only the fastest; weights between equal latencies", {"latency_sensitivity_ms": 0},
   [b("A", latency_ms=10, weight=1), b("B", latency_ms=10, weight=3), b("C", latency_ms=10.5)], [
    st({"eligible": ["A", "B"], "shares": {"A": 0.25, "B": 0.75}, "tolerance": 0.001}),
    st(E("C"), set={"A": {"healthy": False}, "B": {"healthy": False}}),
])
sc("x-latency-vs-capacity", "docs/semantics.md: latency band before capacity; overflow stays inside the band", {"latency_sensitivity_ms": 5, "load_balancing_algorithm": "SPRAY_TO_REGION"},
   [b("near", latency_ms=1, endpoints=2, capacity_cps=100), b("far", "z2", latency_ms=50, endpoints=2, capacity_cps=100)], [
    st({"shares": {"near": 1.0}}, offered_cps=500),
], forwarder={"zone": "z1", "region": "r1"})
R2 = [{"zone": "z1", "region": "r1"}, {"zone": "z2", "region": "r1"}, {"zone": "z3", "region": "r1"}, {"zone": "y1", "region": "r2"}]
cap = lambda n, z, c: b(n, z, endpoints=2, capacity_cps=c)
sc("x-waterfall-by-region", "spec/service-lb-policy.md WATERFALL_BY_REGION: own zone first, then the region's other zones by capacity, then the next region", {},
   [cap("a", "z1", 100), cap("b", "z2", 100), cap("c", "z3", 300), cap("d", "y1", 100)], [
    st({"shares": {"a": 1.0}}, offered_cps=50),
    st({"shares": {"a": 0.5, "b": 0.125, "c": 0.375}}, offered_cps=200),
    st({"shares": {"a": 0.2, "b": 0.2, "c": 0.6}}, offered_cps=500),
    st({"shares": {"a": 100/600, "b": 100/600, "c": 300/600, "d": 100/600}, "tolerance": 0.001}, offered_cps=600),
    st({"shares": {"a": 1/6, "b": 1/6, "c": 0.5, "d": 1/6}, "tolerance": 0.001}, offered_cps=1200),
], zones=R2, forwarder={"zone": "z1", "region": "r1"}, rtt_ms={"z1": {"z2": 1, "z3": 2, "y1": 30}})
sc("x-spray-overflow", "spec/service-lb-policy.md: every algorithm overflows to the next region; isolation stops it", {"load_balancing_algorithm": "SPRAY_TO_REGION"},
   [cap("a", "z1", 100), cap("b", "z2", 100), cap("d", "y1", 200)], [
    st({"shares": {"a": 0.5, "b": 0.5}}, offered_cps=100),
    st({"shares": {"a": 0.25, "b": 0.25, "d": 0.5}}, offered_cps=400),
], zones=R2, forwarder={"zone": "z1", "region": "r1"}, rtt_ms={"z1": {"z2": 1, "y1": 30}})
sc("x-capacity-scaler", "spec/service-lb-policy.md: target = capacity x scaler; scaler 0 = no traffic", {"load_balancing_algorithm": "SPRAY_TO_REGION"},
   [b("a", endpoints=2, capacity_cps=100, capacity_scaler=0.5), b("b", "z2", endpoints=2, capacity_cps=100)], [
    st({"shares": {"a": 1/3, "b": 2/3}, "tolerance": 0.001}, offered_cps=60),
    st({"shares": {"b": 1.0}}, offered_cps=60, set={"a": {"capacity_scaler": 0.0}}),
], forwarder={"zone": "z1", "region": "r1"})
sc("x-failover-threshold", "spec/service-lb-policy.md failover health threshold (default 70)", {"load_balancing_algorithm": "SPRAY_TO_REGION"},
   [b("g1", endpoints=8, capacity_cps=100), b("g2", "z2", endpoints=8, capacity_cps=100), b("f", failover=True, endpoints=4, capacity_cps=100)], [
    st({"shares": {"g1": 0.5, "g2": 0.5}}, offered_cps=100),
    st({"shares": {"g1": 0.5, "g2": 0.5}}, offered_cps=100, set={"g1": {"healthy_endpoints": 6}}),
    st({"shares": {"f": 0.5, "g2": 0.5}}, offered_cps=100, set={"g1": {"healthy_endpoints": 5}}),
    st({"shares": {"g1": 0.5, "g2": 0.5}}, offered_cps=100, set={"f": {"healthy": False}}),
], forwarder={"zone": "z1", "region": "r1"})
sc("x-threshold-vs-drain", "docs/semantics.md: auto drain runs first; a drained group leaves the set and its traffic goes to the other primaries", {"load_balancing_algorithm": "SPRAY_TO_REGION", "auto_capacity_drain": True, "failover_health_threshold": 50},
   [b("g1", endpoints=8, healthy_endpoints=1, capacity_cps=100), b("g2", endpoints=8, capacity_cps=100), b("g3", "z2", endpoints=8, capacity_cps=100),
    b("g4", "z2", endpoints=8, healthy_endpoints=3, capacity_cps=100), b("f", "z2", failover=True, endpoints=4, capacity_cps=100)], [
    st({"shares": {"g2": 1/3, "g3": 1/3, "f": 1/3}, "tolerance": 0.001}, offered_cps=90),
], forwarder={"zone": "z1", "region": "r1"})
sc("x-drain-cap", "spec/service-lb-policy.md: drained/all stays below 50 %", {"load_balancing_algorithm": "SPRAY_TO_REGION", "auto_capacity_drain": True},
   [b("g1", endpoints=10, healthy_endpoints=1, capacity_cps=100), b("g2", endpoints=10, healthy_endpoints=2, capacity_cps=100),
    b("g3", "z2", endpoints=10, capacity_cps=100), b("g4", "z2", endpoints=10, capacity_cps=100)], [
    st({"shares": {"g2": 1/3, "g3": 1/3, "g4": 1/3}, "tolerance": 0.001}, offered_cps=30, at_sec=0),
    st({"shares": {"g2": 1/3, "g3": 1/3, "g4": 1/3}, "tolerance": 0.001}, offered_cps=30, at_sec=30, set={"g1": {"healthy_endpoints": 4}}),
    st({"shares": {"g2": 1/3, "g3": 1/3, "g4": 1/3}, "tolerance": 0.001}, offered_cps=30, at_sec=50, set={"g1": {"healthy_endpoints": 3}}),
    st({"shares": {"g2": 1/3, "g3": 1/3, "g4": 1/3}, "tolerance": 0.001}, offered_cps=30, at_sec=100, set={"g1": {"healthy_endpoints": 4}}),
    st({"shares": {"g1": 1/3, "g3": 1/3, "g4": 1/3}, "tolerance": 0.001}, offered_cps=30, at_sec=160),
    st({"shares": {"g1": 1/3, "g3": 1/3, "g4": 1/3}, "tolerance": 0.001}, offered_cps=30, at_sec=161, set={"g2": {"healthy_endpoints": 10}}),
    st({"shares": {"g1": 0.25, "g2": 0.25, "g3": 0.25, "g4": 0.25}}, offered_cps=30, at_sec=221),
], forwarder={"zone": "z1", "region": "r1"})
sc("x-za-other-region-client", "spec/zonal-affinity.md: clients of other regions are not compatible", {"zonal_affinity": "ZONAL_AFFINITY_STAY_WITHIN_ZONE"},
   [b("a1", "z1"), b("y", "y1")], [st(E("a1", "y"), client="10.9.0.1"), st(E("a1"), client=C1)],
   zones=Z3, client_zones=CZ + [{"prefix": "10.9.0.0/16", "zone": "y1"}], forwarder={"zone": "z1", "region": "r1"})
sc("x-weights", "spec/origin-routing.md weights 3:7 and drop_traffic_if_unhealthy", {"failover_ratio": 0.0, "drop_traffic_if_unhealthy": True},
   [b("A", weight=3), b("B", weight=7), b("F", failover=True, weight=1000)], [
    st({"shares": {"A": 0.3, "B": 0.7}, "tolerance": 0.0001}),
    st({"shares": {"B": 1.0}}, set={"A": {"healthy": False}}),
    st(E("F"), set={"B": {"healthy": False}}),
    st(DROP, set={"F": {"healthy": False}}),
    st({"config_error": "weight"}, set={"A": {"weight": 0}}),
])
sc("x-drain-healthy-before-last-resort", "docs/semantics.md choice 3a (Kubernetes KEP-1669 terminating endpoints; QA B41): healthy draining backends before the all-unhealthy last resort; all draining or the rest disabled stays drop",
   {}, [b("b1", capacity_scaler=0.0), b("b2", "z2", capacity_scaler=0.0), b("b3", healthy=False), b("b4", "z2", healthy=False)], [
    st(E("b1", "b2")),
    st(E("b3"), set={"b3": {"healthy": True}}),
    st(DROP, set={"b3": {"capacity_scaler": 0.0}, "b4": {"capacity_scaler": 0.0}}),
    st(DROP, set={"b3": {"capacity_scaler": 1.0, "enabled": False}, "b4": {"capacity_scaler": 1.0, "enabled": False}}),
    st(E("b1", "b2"), set={"b3": {"enabled": True, "healthy": False}}),
])
