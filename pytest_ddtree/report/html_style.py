"""The inline style sheet of ``sweep.html`` (light and dark; no external resource)."""

CSS = """
:root{--bg:#f6f7fb;--card:#fff;--ink:#1d2433;--muted:#667085;--line:#e4e7ee;--grid:#edf0f5;
--accent:#3b5bdb;--good:#2b8a3e;--bad:#d6336c;--bad-bg:#fff0f4;--best:#e6f7ee;--tie:#fff6dd;
--shadow:0 1px 2px rgba(16,24,40,.06),0 4px 16px rgba(16,24,40,.06)}
@media (prefers-color-scheme:dark){:root{--bg:#10131a;--card:#171b24;--ink:#e6e9f0;
--muted:#98a2b3;--line:#2a3040;--grid:#222836;--accent:#7c9cff;--good:#51cf66;--bad:#ff6b9a;
--bad-bg:#2a1620;--best:#15301f;--tie:#2e2a17;--shadow:none}}
*{box-sizing:border-box}
body{margin:0;background:var(--bg);color:var(--ink);
font:15px/1.5 system-ui,-apple-system,"Segoe UI",Roboto,"Helvetica Neue",Arial,sans-serif}
main{max-width:1180px;margin:0 auto;padding:28px 20px 48px}
header .eyebrow{color:var(--accent);font-weight:600;letter-spacing:.06em;text-transform:uppercase;
font-size:12px}
h1{margin:4px 0 2px;font-size:28px}
h2{margin:0 0 10px;font-size:17px}
.muted,.sub,.meta-line{color:var(--muted)}
.meta-line{font-size:13px;margin-bottom:18px;word-break:break-all}
.cards{display:grid;grid-template-columns:2fr 1fr 1fr;gap:16px;margin-bottom:16px}
@media (max-width:820px){.cards,.pair{grid-template-columns:1fr!important}}
.card{background:var(--card);border:1px solid var(--line);border-radius:14px;padding:16px 18px;
box-shadow:var(--shadow);margin-bottom:16px}
.cards .card{margin-bottom:0}
.card .label{font-size:12px;color:var(--muted);text-transform:uppercase;letter-spacing:.05em;
font-weight:600}
.card .big{font-size:40px;font-weight:700;line-height:1.15;margin:4px 0}
.card .big .of{font-size:22px;color:var(--muted);font-weight:500}
.card.rec.decisive{background:linear-gradient(135deg,var(--best),var(--card) 70%)}
.card.rec.tied{background:linear-gradient(135deg,var(--tie),var(--card) 70%)}
.card.rec.drifting{background:linear-gradient(135deg,var(--bad-bg),var(--card) 70%)}
.card.good .big{color:var(--good)}
.card.bad .big{color:var(--bad)}
.card.danger{border-color:var(--bad);background:var(--bad-bg)}
.rec-msg{font-size:13px;margin:8px 0 0}
.badge{display:inline-block;margin-left:6px;padding:1px 8px;border-radius:999px;font-size:11px;
background:var(--line);color:var(--ink);text-transform:none;letter-spacing:0}
.pair{display:grid;grid-template-columns:1fr 1fr;gap:16px}
.pair .card{margin-bottom:16px}
svg.chart{max-width:100%;height:auto;display:block;margin:0 auto;font-family:inherit}
.chart-empty{border:1px dashed var(--line);border-radius:10px;padding:28px 18px;
color:var(--muted);text-align:center;font-size:13px}
svg .grid{stroke:var(--grid);stroke-width:1}
svg .axis{stroke:var(--muted);stroke-width:1}
svg .tick{fill:var(--muted);font-size:11px}
svg .axis-title{fill:var(--muted);font-size:12px}
svg .trend{fill:none;stroke:var(--ink);stroke-opacity:.35;stroke-width:2;stroke-dasharray:4 4}
svg .pt{fill-opacity:.72;stroke:var(--card);stroke-width:.8}
svg .iqr,.legend .iqr{fill:var(--accent);fill-opacity:.14;stroke:var(--accent);stroke-opacity:.5}
svg .ci,.legend .ci{stroke:var(--ink);stroke-width:2.2;stroke-linecap:round}
svg .center,.legend .center{fill:var(--ink);stroke:var(--card);stroke-width:1.5}
svg .extra,.legend .extra{fill:var(--muted)}
svg .best-band{fill:var(--good);fill-opacity:.10}
svg .best-label{fill:var(--good);font-size:11px;font-weight:600}
svg .tie-band{fill:#e8a33d;fill-opacity:.09}
svg .tie-label{fill:#c27c0e;font-size:11px}
svg .invalid-strip{fill:var(--bad);fill-opacity:.07}
svg .invalid-title{fill:var(--bad);font-size:11px;font-weight:600}
svg .cross,.legend .cross{stroke:var(--bad);stroke-width:2.4;stroke-linecap:round;fill:none}
svg .invalid-code{fill:var(--bad);font-size:10px}
.legend{display:flex;flex-wrap:wrap;gap:6px 16px;font-size:12px;color:var(--muted);
margin-top:6px;align-items:center}
.legend .lg{display:inline-flex;gap:5px;align-items:center}
.lg-title{font-weight:600}
table.stats{width:100%;border-collapse:collapse;font-size:13px;font-variant-numeric:tabular-nums}
table.stats th{text-align:right;color:var(--muted);font-weight:600;padding:6px 6px;
border-bottom:2px solid var(--line);vertical-align:bottom}
table.stats td{text-align:right;padding:6px 6px;border-bottom:1px solid var(--line)}
table.stats th:first-child,table.stats td:first-child{text-align:left}
table.stats th:last-child,table.stats td:last-child{text-align:left}
.table-scroll{overflow-x:auto}
table.stats td.nowrap,table.one-line td{white-space:nowrap}
table.load-points th,table.load-points td{padding:5px 5px;white-space:nowrap}
table.load-points td:nth-child(2),table.load-points td:nth-child(3){white-space:normal}
ul.notes{font-size:12px;color:var(--muted);margin:8px 0 0;padding-left:0;list-style:none}
table.invalid-table td,table.invalid-table th{text-align:left}
td.msg{font-size:12px}
tr.row-bad td{background:var(--bad-bg)}
.pill{display:inline-block;padding:1px 9px;border-radius:999px;font-size:12px;
background:var(--line)}
.pill.best{background:var(--good);color:#fff}
.pill.tied{background:var(--tie);color:var(--ink);border:1px solid var(--line)}
table.breakeven td.heat{text-align:center;color:#111;font-variant-numeric:tabular-nums}
.pill.bad{background:var(--bad);color:#fff}
.pill.tmpl{background:#e8a33d;color:#1d2433}
.pill.spec{background:#7048e8;color:#fff}
.code{display:inline-block;margin:0 4px 2px 0;padding:0 7px;border-radius:6px;font-size:12px;
font-family:ui-monospace,SFMono-Regular,Menlo,Consolas,monospace;background:var(--bad);color:#fff}
.notice{border-left:4px solid var(--accent);padding:8px 12px;background:var(--card);
border-radius:6px;margin-bottom:16px;font-size:13px}
dl.meta{display:grid;grid-template-columns:max-content 1fr;gap:4px 18px;margin:0;font-size:13px}
dl.meta dt{color:var(--muted)}
dl.meta dd{margin:0;word-break:break-all}
footer{color:var(--muted);font-size:12px;margin-top:24px}
h2.temperature{margin:28px 0 12px;font-size:20px;border-bottom:1px solid var(--line)}
pre{font-size:12px;overflow-x:auto;background:var(--bg);padding:8px;border-radius:6px}
"""
