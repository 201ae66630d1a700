package chart

// palette is the light colour of series-0, series-1, …: the Okabe–Ito
// colours, told apart with any colour vision, with grey for the eighth.
// Presentation attributes carry it as a fallback for pages without CSS.
var palette = [...]string{"#0072b2", "#e69f00", "#009e73", "#cc79a7", "#56b4e9", "#d55e00", "#8a6d00", "#757575"}

// toneColours are the light colours of the tones, fallbacks as palette.
var toneColours = map[Tone]string{Good: "#2e7d32", Warning: "#b26a00", Bad: "#c62828", Neutral: "#757575"}

func fallbackColour(i int, t Tone) string {
	if c, ok := toneColours[t]; ok {
		return c
	}
	return palette[i%len(palette)]
}

// CSS is the charts' stylesheet: series and tone colours for light and
// dark mode (prefers-color-scheme), charts that shrink with the page, the
// look of Table.HTML, and the background of Standalone charts. Serve it as
// a file (for example /static/chart.css) so that a Content-Security-Policy
// of style-src 'self' holds. Axes and text use currentColor, the page's
// text colour. It contains neither "<" nor "&", so it can be embedded in
// SVG as is.
const CSS = `.chart { max-width: 100%; height: auto; overflow: visible; }
.chart .series-0 { color: #0072b2; }
.chart .series-1 { color: #e69f00; }
.chart .series-2 { color: #009e73; }
.chart .series-3 { color: #cc79a7; }
.chart .series-4 { color: #56b4e9; }
.chart .series-5 { color: #d55e00; }
.chart .series-6 { color: #8a6d00; }
.chart .series-7 { color: #757575; }
.chart .chart-good { color: #2e7d32; }
.chart .chart-warning { color: #b26a00; }
.chart .chart-bad { color: #c62828; }
.chart .chart-neutral { color: #757575; }
.chart .chart-clipped { stroke: #fff; }
.chart-standalone { color: #222; }
.chart-bg { fill: #fff; }
.chart-table { border-collapse: collapse; font-variant-numeric: tabular-nums; }
.chart-table caption { text-align: left; font-weight: bold; }
.chart-table th, .chart-table td { padding: 0.1em 0.6em; border-bottom: 1px solid rgba(127, 127, 127, 0.3); }
.chart-table thead th { text-align: right; }
.chart-table thead th:first-child, .chart-table tbody th { text-align: left; font-weight: normal; }
.chart-table td { text-align: right; }
@media (prefers-color-scheme: dark) {
  .chart .series-0 { color: #56b4e9; }
  .chart .series-1 { color: #f0b84a; }
  .chart .series-2 { color: #3fcf9f; }
  .chart .series-3 { color: #e3a1c8; }
  .chart .series-4 { color: #9fd6f5; }
  .chart .series-5 { color: #ff8a4c; }
  .chart .series-6 { color: #e0c44a; }
  .chart .series-7 { color: #a8a8a8; }
  .chart .chart-good { color: #66bb6a; }
  .chart .chart-warning { color: #ffb74d; }
  .chart .chart-bad { color: #ef5350; }
  .chart .chart-neutral { color: #a8a8a8; }
  .chart .chart-clipped { stroke: #161616; }
  .chart-standalone { color: #ddd; }
  .chart-bg { fill: #161616; }
}
`
