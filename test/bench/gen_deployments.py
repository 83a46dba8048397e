#!/usr/bin/env python3
"""Generate N realistic Deployments (plus a Service per ~10) as one
multi-document YAML file, for the `gracekeeper check` benchmark.

    gen_deployments.py N OUT [--seed S]

Deterministic: the same N and seed give byte-identical output. Python
standard library only. Each Deployment is roughly 1.5-3 KB, shaped like the
ones people actually apply: 1-3 containers with ports, httpGet/tcpSocket
probes, resources, 5-10 env vars, labels and annotations; half are opted in
to gracekeeper, some have preStop hooks, some use Recreate, grace periods
vary. Namespaces are spread over 100 `team-XX`.
"""

import argparse
import os
import random
import sys

APPS = [
    "api", "web", "checkout", "orders", "payments", "cart", "search", "catalog",
    "auth", "users", "billing", "invoices", "notifications", "mailer", "gateway",
    "inventory", "shipping", "pricing", "reviews", "recommendations", "media",
    "reports", "ledger", "accounts", "sessions", "profile", "feeds", "events",
]
SUFFIXES = ["", "-worker", "-api", "-svc", "-backend", "-frontend", "-consumer", "-sync"]
REGISTRY = "registry.example.internal"
SIDECARS = [
    ("envoy", "envoyproxy/envoy", "v1.29.{}", 9901, "envoy-admin"),
    ("metrics-exporter", "prom/statsd-exporter", "v0.26.{}", 9102, "statsd"),
    ("log-shipper", "fluent/fluent-bit", "2.2.{}", 2020, "fluent-http"),
    ("cloudsql-proxy", "cloud-sql-proxy", "2.8.{}", 5432, "postgres"),
    ("oauth2-proxy", "oauth2-proxy/oauth2-proxy", "v7.5.{}", 4180, "oauth-http"),
]
ENV_NAMES = [
    "LOG_LEVEL", "LOG_FORMAT", "SERVER_PORT", "DB_HOST", "DB_PORT", "DB_NAME",
    "DB_POOL_SIZE", "REDIS_URL", "KAFKA_BROKERS", "OTEL_EXPORTER_OTLP_ENDPOINT",
    "OTEL_SERVICE_NAME", "JAVA_TOOL_OPTIONS", "SPRING_PROFILES_ACTIVE",
    "FEATURE_FLAGS_URL", "CACHE_TTL_SECONDS", "HTTP_TIMEOUT_MS", "REGION",
    "ENVIRONMENT", "GOMAXPROCS", "NODE_ENV", "WORKERS", "SENTRY_DSN",
    "MAX_BODY_BYTES", "SHUTDOWN_TIMEOUT",
]
TEAMS_N = 100


def q(s):
    """Double-quoted YAML scalar (our strings never contain quotes or
    backslashes, but escape anyway)."""
    return '"' + str(s).replace("\\", "\\\\").replace('"', '\\"') + '"'


def env_value(rng, name, app, ns):
    if name == "LOG_LEVEL":
        return rng.choice(["info", "debug", "warn"])
    if name == "LOG_FORMAT":
        return "json"
    if name in ("SERVER_PORT", "DB_PORT"):
        return str(rng.choice([8080, 5432, 3306, 9000]))
    if name == "DB_HOST":
        return f"{app}-db.{ns}.svc.cluster.local"
    if name == "DB_NAME":
        return app.replace("-", "_")
    if name == "REDIS_URL":
        return f"redis://redis-master.{ns}.svc.cluster.local:6379/{rng.randint(0, 15)}"
    if name == "KAFKA_BROKERS":
        return ",".join(f"kafka-{i}.kafka.svc:9092" for i in range(3))
    if name == "OTEL_EXPORTER_OTLP_ENDPOINT":
        return "http://otel-collector.observability.svc:4317"
    if name == "OTEL_SERVICE_NAME":
        return app
    if name == "JAVA_TOOL_OPTIONS":
        return f"-XX:MaxRAMPercentage={rng.choice([60, 70, 75])}.0 -XX:+UseG1GC"
    if name == "SPRING_PROFILES_ACTIVE":
        return rng.choice(["prod", "prod,kubernetes", "staging"])
    if name == "FEATURE_FLAGS_URL":
        return "http://flagd.platform.svc:8013"
    if name == "REGION":
        return rng.choice(["eu-west-1", "us-east-1", "ap-southeast-2"])
    if name == "ENVIRONMENT":
        return rng.choice(["production", "staging"])
    if name == "NODE_ENV":
        return "production"
    if name == "SENTRY_DSN":
        return f"https://{rng.getrandbits(64):016x}@sentry.example.internal/{rng.randint(2, 90)}"
    if name == "SHUTDOWN_TIMEOUT":
        return f"{rng.choice([10, 15, 20, 30])}s"
    return str(rng.choice([1, 2, 4, 8, 16, 30, 60, 100, 250, 1000, 5000, 1048576]))


def probe(rng, port_name, port, indent, kind):
    p = " " * indent
    lines = [f"{p}{kind}:"]
    if rng.random() < 0.7:
        path = rng.choice(["/healthz", "/readyz", "/actuator/health", "/health/ready", "/ping"])
        if kind == "livenessProbe" and path == "/readyz":
            path = "/livez"
        lines += [f"{p}  httpGet:", f"{p}    path: {path}",
                  f"{p}    port: {port_name if rng.random() < 0.5 else port}"]
        if rng.random() < 0.15:
            lines.append(f"{p}    scheme: HTTP")
    else:
        lines += [f"{p}  tcpSocket:", f"{p}    port: {port}"]
    if kind == "livenessProbe":
        lines.append(f"{p}  initialDelaySeconds: {rng.choice([10, 15, 20, 30, 60])}")
    else:
        lines.append(f"{p}  initialDelaySeconds: {rng.choice([0, 3, 5, 10])}")
    lines.append(f"{p}  periodSeconds: {rng.choice([5, 10, 15])}")
    if rng.random() < 0.4:
        lines.append(f"{p}  timeoutSeconds: {rng.choice([1, 2, 3, 5])}")
    if rng.random() < 0.3:
        lines.append(f"{p}  failureThreshold: {rng.choice([3, 5, 6])}")
    return lines


def resources(rng, indent, small=False):
    p = " " * indent
    cpu_req = rng.choice([10, 25, 50, 100] if small else [100, 200, 250, 500, 1000])
    mem_req = rng.choice([32, 64, 128] if small else [128, 256, 512, 768, 1024, 2048])
    lines = [f"{p}resources:", f"{p}  requests:", f"{p}    cpu: {cpu_req}m",
             f"{p}    memory: {mem_req}Mi"]
    if rng.random() < 0.8:
        lines += [f"{p}  limits:"]
        if rng.random() < 0.5:
            lines.append(f"{p}    cpu: {cpu_req * rng.choice([2, 4])}m")
        lines.append(f"{p}    memory: {mem_req * rng.choice([1, 2])}Mi")
    return lines


def container(rng, name, image, port, port_name, app, ns, main, prestop):
    # kubectl-style compact lists: "- " at the parent key's indentation.
    p = " " * 6
    lines = [f"{p}- name: {name}", f"{p}  image: {image}"]
    if rng.random() < 0.5:
        lines.append(f"{p}  imagePullPolicy: IfNotPresent")
    if main and rng.random() < 0.15:
        lines += [f"{p}  args:", f'{p}  - "--config=/etc/{app}/config.yaml"',
                  f'{p}  - "--listen=:{port}"']
    lines += [f"{p}  ports:", f"{p}  - name: {port_name}",
              f"{p}    containerPort: {port}", f"{p}    protocol: TCP"]
    if main and rng.random() < 0.4:
        mport = rng.choice([9090, 9100, 8081])
        if mport != port:
            lines += [f"{p}  - name: metrics", f"{p}    containerPort: {mport}",
                      f"{p}    protocol: TCP"]
    n_env = rng.randint(5, 10) if main else rng.randint(0, 3)
    if n_env:
        lines.append(f"{p}  env:")
    for env in rng.sample(ENV_NAMES, n_env):
        lines += [f"{p}  - name: {env}", f"{p}    value: {q(env_value(rng, env, app, ns))}"]
    if main and rng.random() < 0.3:
        lines += [f"{p}  - name: POD_NAME", f"{p}    valueFrom:", f"{p}      fieldRef:",
                  f"{p}        fieldPath: metadata.name"]
    if main and rng.random() < 0.3:
        lines += [f"{p}  envFrom:", f"{p}  - secretRef:", f"{p}      name: {app}-secrets"]
    lines += resources(rng, 8, small=not main)
    if main or rng.random() < 0.5:
        lines += probe(rng, port_name, port, 8, "readinessProbe")
    if main and rng.random() < 0.8:
        lines += probe(rng, port_name, port, 8, "livenessProbe")
    if prestop:
        lines += [f"{p}  lifecycle:", f"{p}    preStop:"]
        if rng.random() < 0.6:
            lines += [f"{p}      exec:", f"{p}        command:",
                      f'{p}        - "sh"', f'{p}        - "-c"',
                      f'{p}        - "sleep {prestop}"']
        else:
            lines += [f"{p}      sleep:", f"{p}        seconds: {prestop}"]
    if rng.random() < (0.6 if main else 0.2):
        lines += [f"{p}  securityContext:", f"{p}    runAsNonRoot: true",
                  f"{p}    allowPrivilegeEscalation: false",
                  f"{p}    readOnlyRootFilesystem: {str(rng.random() < 0.7).lower()}"]
        if rng.random() < 0.5:
            lines += [f"{p}    capabilities:", f"{p}      drop:", f'{p}      - "ALL"']
    if main and rng.random() < 0.4:
        lines += [f"{p}  volumeMounts:", f"{p}  - name: config",
                  f"{p}    mountPath: /etc/{app}", f"{p}    readOnly: true"]
    return lines


def deployment(rng, i):
    ns = f"team-{rng.randrange(TEAMS_N):02d}"
    app = rng.choice(APPS) + rng.choice(SUFFIXES)
    name = f"{app}-{i:05d}"
    version = f"{rng.randint(1, 4)}.{rng.randint(0, 30)}.{rng.randint(0, 20)}"
    opted_in = i % 2 == 0
    recreate = rng.random() < 0.1
    n_containers = rng.choices([1, 2, 3], weights=[70, 24, 6])[0]
    grace = rng.choice([None, None, 10, 20, 30, 30, 45, 60, 90, 120])
    prestop_main = rng.choice([None, None, None, 5, 10, 15, 20]) if not recreate else None

    main_port = rng.choice([8080, 8080, 3000, 5000, 8000, 9000])
    lines = [
        "apiVersion: apps/v1",
        "kind: Deployment",
        "metadata:",
        f"  name: {name}",
        f"  namespace: {ns}",
        "  labels:",
        f"    app.kubernetes.io/name: {app}",
        f"    app.kubernetes.io/instance: {name}",
        f"    app.kubernetes.io/version: {q(version)}",
        f"    app.kubernetes.io/part-of: {rng.choice(APPS)}",
        f"    team: {ns}",
        "  annotations:",
        f"    deployment.kubernetes.io/revision: {q(rng.randint(1, 300))}",
    ]
    helm = rng.random() < 0.5
    if helm:
        lines.insert(lines.index(f"    team: {ns}"), "    app.kubernetes.io/managed-by: Helm")
        lines += [f"    meta.helm.sh/release-name: {app}",
                  f"    meta.helm.sh/release-namespace: {ns}"]
    if opted_in:
        lines.append('    gracekeeper.dev/enabled: "true"')
        if rng.random() < 0.3:
            lines.append(f"    gracekeeper.dev/drain-seconds: {q(rng.choice([5, 10, 15, 20, 30]))}")
    elif rng.random() < 0.1:
        lines.append('    gracekeeper.dev/enabled: "false"')
    lines += [
        "spec:",
        f"  replicas: {rng.choice([1, 2, 2, 3, 3, 3, 4, 6, 10])}",
        "  selector:",
        "    matchLabels:",
        f"      app.kubernetes.io/name: {app}",
        f"      app.kubernetes.io/instance: {name}",
        "  strategy:",
    ]
    if recreate:
        lines.append("    type: Recreate")
    else:
        surge, unavail = rng.choice([("25%", "25%"), (1, 0), ("25%", 0), (1, 1), (2, 0), ("50%", "25%")])
        lines += ["    type: RollingUpdate", "    rollingUpdate:",
                  f"      maxSurge: {q(surge) if isinstance(surge, str) else surge}",
                  f"      maxUnavailable: {q(unavail) if isinstance(unavail, str) else unavail}"]
    lines += [
        "  template:",
        "    metadata:",
        "      labels:",
        f"        app.kubernetes.io/name: {app}",
        f"        app.kubernetes.io/instance: {name}",
        f"        app.kubernetes.io/version: {q(version)}",
    ]
    if helm or rng.random() < 0.3:
        lines += ["      annotations:", f"        checksum/config: {rng.getrandbits(256):064x}"]
        if rng.random() < 0.5:
            lines += ['        prometheus.io/scrape: "true"',
                      f'        prometheus.io/port: "{rng.choice([9090, 9100, main_port])}"']
    lines += ["    spec:"]
    if rng.random() < 0.7:
        lines.append(f"      serviceAccountName: {app}")
    if grace is not None:
        lines.append(f"      terminationGracePeriodSeconds: {grace}")
    if rng.random() < 0.5:
        lines += ["      securityContext:", "        runAsNonRoot: true",
                  f"        runAsUser: {rng.choice([1000, 10001, 65532])}",
                  f"        fsGroup: {rng.choice([1000, 2000])}"]
    lines.append("      containers:")
    image = f"{REGISTRY}/{ns}/{app}:{version}"
    lines += container(rng, app, image, main_port, "http", app, ns, True, prestop_main)
    for name_, img, tag, port, pname in rng.sample(SIDECARS, n_containers - 1):
        sidecar_prestop = rng.choice([None, None, 5]) if prestop_main else None
        lines += container(rng, name_, f"{img}:{tag.format(rng.randint(0, 9))}", port,
                           pname, app, ns, False, sidecar_prestop)
    if any("volumeMounts:" in line for line in lines):
        lines += ["      volumes:", "      - name: config", "        configMap:",
                  f"          name: {app}-config"]
    if rng.random() < 0.3:
        lines += ["      topologySpreadConstraints:", "      - maxSkew: 1",
                  "        topologyKey: topology.kubernetes.io/zone",
                  "        whenUnsatisfiable: ScheduleAnyway", "        labelSelector:",
                  "          matchLabels:", f"            app.kubernetes.io/instance: {name}"]
    return ns, app, name, main_port, lines


def service(ns, app, name, port):
    return [
        "apiVersion: v1",
        "kind: Service",
        "metadata:",
        f"  name: {name}",
        f"  namespace: {ns}",
        "  labels:",
        f"    app.kubernetes.io/name: {app}",
        "spec:",
        "  type: ClusterIP",
        "  selector:",
        f"    app.kubernetes.io/name: {app}",
        f"    app.kubernetes.io/instance: {name}",
        "  ports:",
        "  - name: http",
        "    port: 80",
        "    targetPort: http",
        "    protocol: TCP",
    ]


def main(argv):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("n", type=int, help="number of Deployments")
    ap.add_argument("out", help="output file ('-' for stdout)")
    ap.add_argument("--seed", type=int, default=20240601)
    args = ap.parse_args(argv)
    if args.n < 0:
        ap.error("N must be >= 0")

    rng = random.Random(args.seed)
    docs = []
    for i in range(args.n):
        ns, app, name, port, lines = deployment(rng, i)
        docs.append("\n".join(lines) + "\n")
        if i % 10 == 9:
            docs.append("\n".join(service(ns, app, name, port)) + "\n")
    text = "---\n".join(docs)

    if args.out == "-":
        sys.stdout.write(text)
        return 0
    tmp = f"{args.out}.tmp.{os.getpid()}"
    with open(tmp, "w", encoding="utf-8", newline="\n") as f:
        f.write(text)
    os.replace(tmp, args.out)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
