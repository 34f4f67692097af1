"""The replay page's stylesheet, inline in its <style> (the page fetches nothing).

Each state's tone is one class giving both an SVG fill and an HTML background, so a bar and
its legend swatch or table pill cannot drift apart.
"""

CSS = """
body{font:14px/1.4 system-ui,-apple-system,"Segoe UI",Roboto,sans-serif;margin:24px;
  color:#1d2430;background:#fafbfc}
h1{font-size:22px;margin:0 0 4px}h2{font-size:18px;margin:0}
.sub{color:#5b6472;font-size:13px;margin:2px 0 10px}
section.job{background:#fff;border:1px solid #d8dde4;border-radius:6px;padding:14px 16px;margin:18px 0}
svg.timeline{width:100%;height:auto;display:block;margin:6px 0 10px}
svg text{font:12px system-ui,sans-serif;fill:#1d2430}
svg .tick{fill:#5b6472;font-size:11px}svg .grid{stroke:#e4e8ee}svg .lane{fill:#f3f5f8}
svg .barlabel{fill:#fff;font-size:11px;pointer-events:none}
svg .barlabel.dark{fill:#1d2430}
.pending{fill:#e6a817;background:#e6a817}.running{fill:#3b7dd8;background:#3b7dd8}
.succeeded{fill:#2e9d57;background:#2e9d57}.failed{fill:#d0433b;background:#d0433b}
.unknown{fill:#8a939f;background:#8a939f}.created{fill:#9fb7d6;background:#9fb7d6}
.suspended{fill:#8c5cc7;background:#8c5cc7}.deleted{fill:#6b7280;background:#6b7280}
.orphaned{fill:#c2410c;background:#c2410c}
.crash{fill:url(#crash)}
svg .restart{stroke:#7a1010;stroke-width:2}svg .restarttext{fill:#7a1010;font-size:10px;font-weight:600}
svg .ignored{fill:#fff;stroke:#8a939f;stroke-width:1.5}svg .ignoredtext{fill:#6b7280;font-size:10px}
svg .ended{stroke:#1d2430;stroke-width:2.5}
.decision-delete{fill:#b91c1c;background:#b91c1c}.decision-warn{fill:#f59e0b;background:#f59e0b}
.decision-suspend{fill:#7c3aed;background:#7c3aed}.decision-skip{fill:#9ca3af;background:#9ca3af}
svg .marker{stroke:#fff;stroke-width:1.2}
table{border-collapse:collapse;width:100%;margin:6px 0 10px;font-size:13px}
th,td{border-bottom:1px solid #e4e8ee;padding:4px 6px;text-align:left;vertical-align:top}
th{background:#f3f5f8;font-weight:600}
td.mono,.mono{font-family:ui-monospace,SFMono-Regular,Menlo,Consolas,monospace;font-size:12px}
.legend{display:flex;flex-wrap:wrap;gap:6px 16px;font-size:12px;margin:10px 0}
.legend span.sw{display:inline-block;width:14px;height:10px;border-radius:2px;margin-right:5px;
  vertical-align:-1px}
.pill{display:inline-block;padding:0 6px;border-radius:8px;color:#fff;font-size:12px}
h3{font-size:14px;margin:12px 0 2px}
.none{color:#5b6472;font-style:italic}
"""
