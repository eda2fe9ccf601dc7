"""The report page's stylesheet, inlined so that report.html is one self-contained file."""

CSS = """
body{font:14px/1.45 system-ui,-apple-system,"Segoe UI",Roboto,sans-serif;color:#1d1d1f;margin:0;background:#f4f5f7}
main{max-width:1340px;margin:0 auto;padding:20px 28px 40px}
h1{font-size:24px;margin:4px 0}h2{font-size:18px;margin:28px 0 10px;border-bottom:1px solid #d8dbe0;padding-bottom:4px}
.meta{color:#555;font-size:13px;word-break:break-all}
.note{background:#fff4e5;border-left:4px solid #e69f00;padding:6px 10px}
table{border-collapse:collapse;background:#fff;font-variant-numeric:tabular-nums}
th,td{border:1px solid #d8dbe0;padding:5px 10px;text-align:right;vertical-align:top}
th{background:#eef0f3;text-align:left}td.l,th.l{text-align:left}
table.results td{min-width:170px}.acc{font-size:16px;font-weight:600}.sub{color:#666;font-size:12px}
.delta{font-size:13px}.pos{color:#006d4e}.neg{color:#b8430b}
.summary{display:flex;gap:10px;flex-wrap:wrap;margin:10px 0}
.chip{padding:4px 10px;border-radius:14px;font-size:13px;text-decoration:none;color:inherit}
.chip.warn{background:#fde2cf;border:1px solid #d55e00}.chip.ok{background:#d9f2e6;border:1px solid #009e73}
.chip.info{background:#e3eef8;border:1px solid #0072b2}
.flags{display:grid;grid-template-columns:repeat(auto-fill,minmax(620px,1fr));gap:12px}
.flag{background:#fff;border:1px solid #ccc;border-left-width:6px;border-radius:4px;padding:8px 14px}
.flag h3{margin:2px 0 4px;font-size:15px}.flag p{margin:4px 0}.flag ul{margin:4px 0;padding-left:20px}
.flag.warn{border-color:#d55e00;background:#fff8f3}.flag.ok{border-color:#009e73}.flag.info{border-color:#0072b2}
.flag .lvl{font-size:11px;font-weight:700;letter-spacing:.05em;padding:1px 6px;border-radius:3px;margin-right:6px;
color:#fff}
.flag.warn .lvl{background:#d55e00}.flag.ok .lvl{background:#009e73}.flag.info .lvl{background:#0072b2}
.flag table{margin-top:6px;font-size:12.5px}.flag.wide{grid-column:1/-1}
main>h3{font-size:16px;margin:14px 0 8px}
.figs{display:grid;grid-template-columns:repeat(auto-fill,minmax(620px,1fr));gap:12px}
figure{margin:0;background:#fff;border:1px solid #d8dbe0;border-radius:4px;padding:8px 10px}
figcaption{font-weight:600;margin-bottom:2px}figure .cap{color:#555;font-size:12.5px;margin-top:4px}
svg{width:100%;height:auto;display:block;font-family:system-ui,sans-serif}
svg .tick{font-size:11px;fill:#444}svg .axis{font-size:12px;fill:#222}svg .legend{font-size:12px;fill:#222}
svg .bar{font-size:11px;fill:#222}
footer{color:#666;font-size:12px;margin-top:28px}
"""
