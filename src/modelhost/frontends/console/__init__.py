"""The web console: `GET /` on the HTTP port, a page that shows and steers the server from a browser
(docs/console.md).

The page is rendered here with what the engine says (so it reads as a table without JavaScript); its script then
keeps it current through the server's own API only (repository index, statistics, configuration, health, model
control), so restrictions and errors apply to it as to any client. Its assets ship in the package (`assets/`),
with uPlot, from the npm registry, for the charts.
"""
