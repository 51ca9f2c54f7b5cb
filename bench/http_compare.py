#!/usr/bin/env python3
"""The proxy's HTTP server beside Debian's cpp-httplib under hostile and heavy clients.

Starts each server binary (bench/http_bench_server.cpp, built as http_bench_ours and
http_bench_httplib), then on 127.0.0.1:
  latency     300 sequential GET /metrics (a ~20 KB body): median and p99 ms
  concurrent  64 client threads x 20 GET /status: requests/s, failures
  slowloris   N connections that send a request head one byte every 0.5 s and never end it;
              meanwhile 5 normal GET /health (5 s timeout each): how many answered, the
              slowest, and how long the server kept the slow connections open
  idle        N connections that send nothing; meanwhile 5 normal GETs
  oversized   one request head of 64 KiB / 1 MiB (one long header), 10,000 small headers:
              the status answered, seconds, server RSS after
Usage: bench/http_compare.py BIN [BIN ...]   (prints a markdown table; --json FILE too)
"""
import json, os, socket, statistics, subprocess, sys, threading, time

REQ = "GET {} HTTP/1.1\r\nHost: bench\r\nConnection: close\r\n\r\n"


def get(port, path="/health", timeout=10.0, head=None):
    """One request on a fresh connection: (status or None, seconds)."""
    t = time.monotonic()
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=timeout) as s:
            s.settimeout(timeout)
            s.sendall((head or REQ.format(path)).encode() if isinstance(head or "", str) else head)
            data = b""
            while True:
                try:
                    b = s.recv(65536)
                except (ConnectionResetError, BrokenPipeError):
                    break
                if not b:
                    break
                data += b
        line = data.split(b"\r\n", 1)[0].split()
        return (int(line[1]) if len(line) > 1 else None), time.monotonic() - t
    except (OSError, ValueError):
        return None, time.monotonic() - t


def rss_kb(pid):
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    return 0


def normal_probe(port, n=5, gap=0.3):
    ok, worst = 0, 0.0
    for _ in range(n):
        st, dt = get(port, "/health", timeout=5)
        ok += st == 200
        worst = max(worst, dt)
        time.sleep(gap)
    return ok, worst


def hostile(port, n, trickle):
    """n connections that trickle a never-ending head (or send nothing); probe meanwhile."""
    socks = []
    for _ in range(n):
        try:
            s = socket.create_connection(("127.0.0.1", port), timeout=2)
            s.setblocking(False)
            if trickle:
                s.send(b"GET /health HTTP/1.1\r\nHost: b\r\nX-Slow: ")
            socks.append([s, time.monotonic(), None])
        except OSError:
            pass
    stop = threading.Event()

    def drip():
        while not stop.is_set():
            for e in socks:
                if e[2] is not None:
                    continue
                try:  # an answer (408) or the end of the stream: the server let go
                    e[0].recv(1, socket.MSG_PEEK)
                    e[2] = time.monotonic() - e[1]
                    continue
                except BlockingIOError:
                    pass
                except OSError:
                    e[2] = time.monotonic() - e[1]
                    continue
                if trickle:
                    try:
                        e[0].send(b"a")
                    except OSError:
                        e[2] = time.monotonic() - e[1]
            stop.wait(0.5)

    th = threading.Thread(target=drip)
    th.start()
    time.sleep(1.0)
    ok, worst = normal_probe(port)
    time.sleep(max(0.0, 12 - (time.monotonic() - socks[0][1])) if socks else 0)
    stop.set()
    th.join()
    held = [e[2] for e in socks if e[2] is not None]
    still = sum(e[2] is None for e in socks)
    for e in socks:
        e[0].close()
    return {"opened": len(socks), "probe_ok": ok, "probe_worst_s": round(worst, 3),
            "closed_by_server": len(held), "median_held_s": round(statistics.median(held), 1) if held else None,
            "still_open_after_12s": still}


def oversized(port, pid, what):
    if what == "64KiB":
        head = "GET /health HTTP/1.1\r\nHost: b\r\nX-Big: " + "a" * 65536 + "\r\n\r\n"
    elif what == "1MiB":
        head = "GET /health HTTP/1.1\r\nHost: b\r\nX-Big: " + "a" * (1 << 20) + "\r\n\r\n"
    else:
        head = "GET /health HTTP/1.1\r\nHost: b\r\n" + "".join(f"X-{i}: v\r\n" for i in range(10000)) + "\r\n"
    st, dt = get(port, head=head, timeout=15)
    return {"status": st, "seconds": round(dt, 3), "rss_kb": rss_kb(pid)}


def bench(binary):
    p = subprocess.Popen([binary], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    port = int(p.stdout.readline().split()[1])
    r = {"server": os.path.basename(binary), "rss_start_kb": rss_kb(p.pid)}
    lat = [get(port, "/metrics")[1] for _ in range(300)]
    lat.sort()
    r["latency_ms"] = {"median": round(1000 * statistics.median(lat), 2), "p99": round(1000 * lat[int(0.99 * len(lat)) - 1], 2)}
    fails = [0]
    lock = threading.Lock()

    def client():
        for _ in range(20):
            st, _ = get(port, "/status", timeout=10)
            if st != 200:
                with lock:
                    fails[0] += 1

    t = time.monotonic()
    ths = [threading.Thread(target=client) for _ in range(64)]
    [x.start() for x in ths]
    [x.join() for x in ths]
    r["concurrent"] = {"requests_per_s": round(64 * 20 / (time.monotonic() - t)), "failures": fails[0]}
    for n in (1, 16, 256):
        r[f"slowloris_{n}"] = hostile(port, n, True)
    r["idle_512"] = hostile(port, 512, False)
    for what in ("64KiB", "1MiB", "10k_headers"):
        r[f"oversized_{what}"] = oversized(port, p.pid, what)
    r["alive_after"] = get(port, "/health")[0] == 200
    r["rss_end_kb"] = rss_kb(p.pid)
    p.stdin.close()
    try:
        p.wait(timeout=20)
    except subprocess.TimeoutExpired:
        p.kill()
    return r


def table(rs):
    rows = [("GET /metrics median / p99 ms", lambda r: f"{r['latency_ms']['median']} / {r['latency_ms']['p99']}"),
            ("64 threads x 20 GET: req/s (failures)", lambda r: f"{r['concurrent']['requests_per_s']} ({r['concurrent']['failures']})")]
    for k in ("slowloris_1", "slowloris_16", "slowloris_256", "idle_512"):
        rows.append((f"{k}: normal GETs answered / slowest s / server closed hostile (median held s)",
                     lambda r, k=k: f"{r[k]['probe_ok']}/5 / {r[k]['probe_worst_s']} / {r[k]['closed_by_server']} of {r[k]['opened']} ({r[k]['median_held_s']})"))
    for k in ("64KiB", "1MiB", "10k_headers"):
        rows.append((f"head {k}: status, s", lambda r, k=k: f"{r['oversized_' + k]['status']}, {r['oversized_' + k]['seconds']}"))
    rows.append(("RSS start -> end (KB)", lambda r: f"{r['rss_start_kb']} -> {r['rss_end_kb']}"))
    rows.append(("alive after", lambda r: str(r["alive_after"])))
    out = ["| | " + " | ".join(r["server"] for r in rs) + " |", "|---" * (len(rs) + 1) + "|"]
    out += ["| " + name + " | " + " | ".join(f(r) for r in rs) + " |" for name, f in rows]
    return "\n".join(out)


if __name__ == "__main__":
    args = sys.argv[1:]
    jpath = None
    if "--json" in args:
        i = args.index("--json")
        jpath = args[i + 1]
        del args[i:i + 2]
    results = []
    for b in args:
        results.append(bench(b))
        print(json.dumps(results[-1]), file=sys.stderr, flush=True)
    if jpath:
        json.dump(results, open(jpath, "w"), indent=1)
    print(table(results))
