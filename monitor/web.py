"""``shoal monitor``: a poll loop in a thread and an HTTP server with the page, a JSON API and /metrics.

Routes (all GET):

- ``/``              the page: a table of partitions and replicas with their status, and one chart
                     of lag over time per channel reader, updated live (inline JS polls the API;
                     charts are inline SVG, nothing is loaded from the network);
- ``/api/snapshot``  the latest snapshot (:class:`monitor.models.Snapshot`);
- ``/api/history``   the lag series for the charts (:class:`monitor.models.HistoryView`);
- ``/metrics``       Prometheus text format (names in :mod:`monitor.metrics`);
- ``/healthz``       ``ok`` while the last poll succeeded and is fresh (at most 3 intervals and
                     10 s old); 503 with the reason otherwise.

While polls fail, the page, ``/api/snapshot`` and the metrics show the last snapshot marked ERR
with a ``monitor`` problem naming the failure (:meth:`Collector.served_snapshot`): a monitor that
cannot reach Kafka never goes on reporting OK.
"""

from __future__ import annotations

import json
import logging
from typing import Any

from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.exposition import CONTENT_TYPE_LATEST

from monitor.collector import Collector
from monitor.http_server import HttpServer
from monitor.metrics import SnapshotMetrics
from shoal.worker import Backoff, Worker

log = logging.getLogger(__name__)
CHART_COLOUR = "#1f77b4"
"""Stroke colour of every lag line (tests look for it in the screenshot)."""


class MonitorService:
    """Polls every ``config.interval_s`` in a thread and serves the results over HTTP."""

    def __init__(self, collector: Collector, *, host: str = "127.0.0.1", port: int = 0) -> None:
        self.collector = collector
        self.registry = CollectorRegistry(auto_describe=False)
        self.registry.register(SnapshotMetrics(collector))
        self.server = HttpServer(
            {
                "/": self._page,
                "/index.html": self._page,
                "/api/snapshot": self._snapshot,
                "/api/history": self._history,
                "/metrics": self._metrics,
                "/healthz": self._health,
            },
            host=host,
            port=port,
        )
        self._poller = _Poller(self)

    @property
    def url(self) -> str:
        return self.server.url

    def start(self) -> MonitorService:
        self.server.start()
        self._poller.start()
        return self

    @property
    def last_error(self) -> str | None:
        """Why the last poll failed; None when it succeeded."""
        return self.collector.last_error

    def poll_once(self) -> bool:
        """One collector poll; a failure is kept in ``last_error`` (shown by /healthz and /api).
        Returns whether the poll succeeded."""
        try:
            self.collector.poll()
            return True
        except Exception:
            log.warning("monitor poll failed: %s", self.collector.last_error)
            return False

    def close(self) -> None:
        self._poller.stop(timeout=30)
        self.server.close()
        self.collector.close()

    def __enter__(self) -> MonitorService:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- routes ---------------------------------------------------------------------------------

    def _json(self, obj: Any) -> tuple[int, str, bytes]:
        return 200, "application/json", json.dumps(obj, sort_keys=True).encode()

    def _snapshot(self) -> tuple[int, str, bytes]:
        snap = self.collector.served_snapshot()
        if snap is None:
            return 503, "application/json", json.dumps({"error": self.last_error or "no poll yet"}).encode()
        return self._json(snap.to_json())

    def _history(self) -> tuple[int, str, bytes]:
        return self._json(self.collector.history_view().to_json())

    def _metrics(self) -> tuple[int, str, bytes]:
        return 200, CONTENT_TYPE_LATEST, generate_latest(self.registry)

    def _health(self) -> tuple[int, str, bytes]:
        snap = self.collector.snapshot
        if snap is None:
            return 503, "text/plain", f"no successful poll yet: {self.last_error}\n".encode()
        if self.last_error is not None:
            return 503, "text/plain", f"the last poll failed: {self.last_error}\n".encode()
        now, finished = self.collector.now(), self.collector.finished_at
        if now - (finished if finished is not None else snap.generated_at) > self.collector.stale_after_s():
            age = now - snap.generated_at
            return 503, "text/plain", f"the last snapshot is {age:.0f} s old (polls stuck?)\n".encode()
        return 200, "text/plain", b"ok\n"

    def _page(self) -> tuple[int, str, bytes]:
        snap = self.collector.served_snapshot()
        initial = {
            "snapshot": None if snap is None else snap.to_json(),
            "history": self.collector.history_view().to_json(),
        }
        data = json.dumps(initial).replace("</", "<\\/")
        refresh_ms = max(500, int(self.collector.config.interval_s * 1000))
        body = PAGE.replace("__INITIAL__", data).replace("__REFRESH_MS__", str(refresh_ms))
        return 200, "text/html; charset=utf-8", body.replace("__COLOUR__", CHART_COLOUR).encode()


PAGE = """<!doctype html>
<html lang="en"><head><meta charset="utf-8"><title>shoal monitor</title>
<style>
body{font-family:system-ui,sans-serif;margin:16px;color:#222;background:#fff}
h1{font-size:20px;margin:0 0 8px} h2{font-size:16px;margin:18px 0 6px}
table{border-collapse:collapse;font-size:13px} th,td{border:1px solid #ccc;padding:3px 6px;text-align:left}
th{background:#f0f0f0} td.num{text-align:right;font-variant-numeric:tabular-nums}
.s{font-weight:bold;padding:1px 6px;border-radius:3px;color:#fff}
.s-OK{background:#2a9d3a}.s-WARN{background:#d89b00}.s-STALL{background:#e06c00}
.s-STOP{background:#c0392b}.s-REWIND{background:#8e44ad}.s-ERR{background:#7b0000}
#charts{display:flex;flex-wrap:wrap;gap:10px}
.chart{border:1px solid #ccc;padding:4px} .chart .t{font-size:12px;margin-bottom:2px}
.muted{color:#777;font-size:12px}
</style></head>
<body>
<h1>shoal monitor <span id="overall" class="s s-OK">OK</span></h1>
<div class="muted" id="meta">waiting for the first poll</div>
<h2>Partitions and replicas</h2>
<table id="partitions"><thead><tr><th>table</th><th>partition</th><th>leader</th><th>epoch</th>
<th>channel</th><th>replica</th><th>ack / consume</th><th>append / tail</th><th>lag (records)</th>
<th>lag (s)</th><th>status</th><th>reason</th></tr></thead><tbody></tbody></table>
<h2>Leaders per node</h2>
<table id="leaders"><thead><tr><th>table</th><th>leaders per node</th><th>on their preferred leader</th></tr></thead>
<tbody></tbody></table>
<h2>Problems</h2><ul id="problems"></ul>
<h2>Lag over time</h2><div id="charts"></div>
<script id="initial" type="application/json">__INITIAL__</script>
<script>
(function(){
"use strict";
var SVGNS="http://www.w3.org/2000/svg", COLOUR="__COLOUR__";
function el(tag,attrs,text){var e=document.createElement(tag);for(var k in (attrs||{}))e.setAttribute(k,attrs[k]);
  if(text!==undefined&&text!==null)e.textContent=String(text);return e;}
function sv(tag,attrs){var e=document.createElementNS(SVGNS,tag);
  for(var k in attrs)e.setAttribute(k,attrs[k]);return e;}
function badge(s){return el("span",{"class":"s s-"+s},s);}
function fmt(v){return v===null||v===undefined?"-":String(v);}
function row(tbody,cells,status,reason,cls){
  var tr=el("tr",{"class":cls,"data-status":status});
  cells.forEach(function(c){var td=el("td",{},c);if(typeof c==="number")td.className="num";tr.appendChild(td);});
  var td=el("td");td.appendChild(badge(status));tr.appendChild(td);tr.appendChild(el("td",{},reason||""));
  tbody.appendChild(tr);}
function renderTable(snap){
  var tbody=document.querySelector("#partitions tbody");tbody.innerHTML="";
  (snap.tables||[]).forEach(function(t){(t.partitions||[]).forEach(function(p){
    var pid=p.partition_id.slice(0,12), lead=p.leader?p.leader.server_id+"#"+p.leader.placement_id:"none";
    var pref=p.preferred_leader;
    if(pref&&(!p.leader||p.leader.server_id!==pref))lead+=" (preferred "+pref+")";
    var ing=p.ingest;
    row(tbody,[t.table,pid,lead,p.epoch,"ingest","leader",fmt(ing.accepted_index),
      fmt(ing.log_end),ing.lag_records===undefined?"-":ing.lag_records,fmt(ing.lag_seconds)],
      ing.status,ing.reason,"partition-row");
    (p.wal||[]).forEach(function(c){
      var name="wal#"+c.owner.placement_id+(c.is_leader_channel?" (leader)":"");
      if(!c.exists){row(tbody,[t.table,pid,lead,p.epoch,name,"-","-","-","-","-"],c.status,c.reason,"channel-row");return;}
      c.replicas.forEach(function(r){
        row(tbody,[t.table,pid,lead,p.epoch,name,r.server_id+"#"+r.placement_id,
          fmt(r.ack_index)+" / "+fmt(r.consume_index),c.append_index+" / "+c.tail_index,r.lag_records,
          fmt(r.lag_seconds)],r.status,r.reason,"replica-row");});});
    (p.segments||[]).forEach(function(c){
      if(!c.exists)return;
      var name="segments#"+c.owner.placement_id+" ("+c.manifests+" seg, "+c.minors_awaiting_compaction+" minors)";
      c.replicas.forEach(function(r){
        row(tbody,[t.table,pid,lead,p.epoch,name,r.server_id+"#"+r.placement_id,
          fmt(r.ack_index)+" ("+r.unacked_segments+" unacked)",c.log_end+" / "+c.log_start,r.lag_records,
          fmt(r.lag_seconds)],r.status,r.reason,"replica-row");});});
  });});
  (snap.spark_queries||[]).forEach(function(q){q.partitions.forEach(function(pp){
    row(tbody,["spark",q.query,"-","-",pp.topic+"["+pp.partition+"]","query",fmt(pp.committed),
      fmt(pp.log_end),pp.lag_records,fmt(pp.lag_seconds)],pp.status,pp.reason,"spark-row");});});
  var lb=document.querySelector("#leaders tbody");lb.innerHTML="";
  (snap.tables||[]).forEach(function(t){var per=t.leaders_per_node||{};
    var txt=Object.keys(per).sort().map(function(n){return n+" "+per[n];}).join(", ")||"-";
    var tr=el("tr",{"class":"leaders-row"});[t.table,txt,t.on_preferred_leader+" / "+(t.partitions||[]).length]
      .forEach(function(c){tr.appendChild(el("td",{},c));});lb.appendChild(tr);});
  var ul=document.getElementById("problems");ul.innerHTML="";
  (snap.problems||[]).forEach(function(pr){var li=el("li");li.appendChild(badge(pr.status));
    li.appendChild(document.createTextNode(" "+pr.where+": "+pr.reason));ul.appendChild(li);});
  if(!(snap.problems||[]).length)ul.appendChild(el("li",{"class":"muted"},"none"));
  var o=document.getElementById("overall");o.className="s s-"+snap.status;o.textContent=snap.status;
  document.getElementById("meta").textContent="cluster "+snap.cluster_id+" \\u00b7 polled "+
    new Date(snap.generated_at*1000).toLocaleTimeString()+" \\u00b7 window "+snap.window.samples+" x "+
    snap.window.interval_s+"s";}
function renderCharts(hist){
  var box=document.getElementById("charts");box.innerHTML="";
  var W=440,H=130,L=44,B=18;
  Object.keys(hist.series||{}).sort().forEach(function(key){
    var s=hist.series[key], pts=s.points||[]; if(!pts.length)return;
    var div=el("div",{"class":"chart"}); div.appendChild(el("div",{"class":"t"},s.label));
    var svg=sv("svg",{"class":"lag-chart","data-series":key,width:W,height:H,viewBox:"0 0 "+W+" "+H});
    var t0=pts[0][0], t1=pts[pts.length-1][0], span=Math.max(1e-3,t1-t0), maxLag=1;
    pts.forEach(function(p){if(p[1]>maxLag)maxLag=p[1];});
    svg.appendChild(sv("rect",{x:L,y:4,width:W-L-4,height:H-B-4,fill:"#fafafa",stroke:"#bbb"}));
    var yl=sv("text",{x:L-4,y:14,"text-anchor":"end","font-size":10,fill:"#555"});yl.textContent=String(maxLag);
    svg.appendChild(yl);
    var y0=sv("text",{x:L-4,y:H-B,"text-anchor":"end","font-size":10,fill:"#555"});
    y0.textContent="0";svg.appendChild(y0);
    var xl=sv("text",{x:W-4,y:H-4,"text-anchor":"end","font-size":10,fill:"#555"});
    xl.textContent=Math.round(span)+"s of history, lag in records";svg.appendChild(xl);
    var coords=pts.map(function(p){var x=L+(pts.length===1?0:(p[0]-t0)/span)*(W-L-6);
      var y=(H-B-2)-(p[1]/maxLag)*(H-B-10);return x.toFixed(1)+","+y.toFixed(1);});
    if(coords.length===1)coords.push((W-6)+","+coords[0].split(",")[1]);
    svg.appendChild(sv("polyline",{"class":"lag-line",points:coords.join(" "),fill:"none",stroke:COLOUR,
      "stroke-width":3}));
    div.appendChild(svg); box.appendChild(div);});
  if(!box.children.length)box.appendChild(el("div",{"class":"muted"},"no series yet"));}
function render(data){if(data.snapshot)renderTable(data.snapshot);if(data.history)renderCharts(data.history);}
render(JSON.parse(document.getElementById("initial").textContent));
function refresh(){
  Promise.all([fetch("/api/snapshot").then(function(r){return r.ok?r.json():null;}),
               fetch("/api/history").then(function(r){return r.json();})])
    .then(function(a){render({snapshot:a[0],history:a[1]});})
    .catch(function(e){document.getElementById("meta").textContent="refresh failed: "+e;});}
setInterval(refresh,__REFRESH_MS__);
})();
</script>
</body></html>
"""


class _Poller(Worker):
    """``shoal-monitor-poll``: polls the collector every ``interval_s`` until the service closes.

    After failed polls (a broker or the metadata store away) it waits longer, up to ten intervals
    and at most ``FAILED_POLL_MAX_S``: a burst of admin requests during a broker outage is what made librdkafka
    2.16 abort on its ``eonce->refcnt`` assertion, in the nodes and in the monitor."""

    FAILED_POLL_MAX_S = 60.0

    def __init__(self, service: MonitorService) -> None:
        super().__init__("shoal-monitor-poll")
        self._service = service

    def run(self) -> None:
        interval = self._service.collector.config.interval_s
        backoff = Backoff(initial_s=interval, maximum_s=max(interval, min(10 * interval, self.FAILED_POLL_MAX_S)))
        while not self.stopping.is_set():
            if self._service.poll_once():
                backoff.reset()
                self.stopping.wait(interval)
            else:
                self.stopping.wait(max(interval, backoff.next_delay()))
