/* kernelscope dashboard: the browser-side functions the pages name (Dash serves this folder as /assets/).
 *
 * dashAgGridFunctions (column functions of the tables, dashboard/widgets.py):
 *   ksNs(params)          a duration held as integer ns, shown in the column's unit: ns / colDef.context.nsPer,
 *                         rounded to colDef.context.digits decimals exactly as Python's round() does
 *   ksFilterValue(params) the value a filter compares: a duration as shown, anything else as held
 *   ksNumberMatch(params) a number column's filter text: ">100", ">=2.5", "<0", "!=3", "=7" or "7"
 *   ksRowId(params)       a row's id as AG Grid wants it, a string (the rows' "id": a trace id, a number, ...)
 * dash_clientside.kernelscope (clientside callbacks):
 *   zoomFilter(relayout)  keeps a figure's x-range changes and the double-click reset, drops the rest
 *   timelineZoom(relayout, graphId)  zoomFilter's answer with "px": the width of the graph's plot area in
 *                         pixels (the Timeline fits the names it writes in bars to it)
 *   toTop(pathname)       scrolls the window to the top when another page opens; returns the path
 */
(function () {
    "use strict";

    // Python's round(x, digits): the decimal nearest to x's exact binary value, an exact tie to even.
    function pyRound(x, digits) {
        var t = x * Math.pow(2, digits + 1);  // exact: a power of two
        if (Number.isInteger(t) && Math.abs(t) % 2 === 1) {  // x lies exactly halfway between two candidates
            var scale = Math.pow(10, digits), y = x * scale, lo = Math.floor(y);  // y: an exact half-integer
            return (lo % 2 === 0 ? lo : lo + 1) / scale;
        }
        return Number(x.toFixed(digits));  // toFixed rounds the exact value; ties were handled above
    }

    function nsShown(value, context) {
        if (value === null || value === undefined || value === "") {
            return null;
        }
        return pyRound(Number(value) / context.nsPer, context.digits);
    }

    var OPS = {
        "<": function (x, y) { return x < y; },
        "<=": function (x, y) { return x <= y; },
        ">": function (x, y) { return x > y; },
        ">=": function (x, y) { return x >= y; },
        "!=": function (x, y) { return x !== y; },
        "=": function (x, y) { return x === y; }
    };
    var NUMBER_FILTER = /^\s*(<=|>=|!=|<|>|=)?\s*([-+]?(?:\d+\.?\d*|\.\d+)(?:e[-+]?\d+)?)\s*$/i;

    window.dashAgGridFunctions = Object.assign({}, window.dashAgGridFunctions, {
        ksPyRound: pyRound,
        ksRowId: function (params) {
            return String(params.data.id);
        },
        ksNs: function (params) {
            var v = nsShown(params.value, params.colDef.context);
            return v === null ? "" : String(v);
        },
        ksFilterValue: function (params) {
            var value = params.data ? params.data[params.colDef.field] : null;
            var context = params.colDef.context;
            return context && context.nsPer ? nsShown(value, context) : value;
        },
        ksNumberMatch: function (params) {
            var text = String(params.filterText || "");
            var m = NUMBER_FILTER.exec(text);
            if (params.value === null || params.value === undefined || params.value === "") {
                return false;
            }
            if (!m) {  // not a comparison: the shown text contains it
                return String(params.value).indexOf(text) >= 0;
            }
            return OPS[m[1] || "="](Number(params.value), Number(m[2]));
        }
    });

    function plotWidth(graphId) {
        var el = document.getElementById(graphId);
        var gd = el && (el.classList.contains("js-plotly-plot") ? el : el.querySelector(".js-plotly-plot"));
        var size = gd && gd._fullLayout && gd._fullLayout._size;
        return size && size.w > 0 ? Math.round(size.w) : null;
    }

    window.dash_clientside = Object.assign({}, window.dash_clientside, {
        kernelscope: {
            toTop: function (pathname) {
                window.scrollTo(0, 0);
                return pathname;
            },
            timelineZoom: function (r, graphId) {
                var out = window.dash_clientside.kernelscope.zoomFilter(r);
                if (out === window.dash_clientside.no_update) { return out; }
                var px = plotWidth(graphId);
                if (px !== null) { out.px = px; }
                return out;
            },
            zoomFilter: function (r) {
                var nu = window.dash_clientside.no_update, lo = null, hi = null;
                if (!r) { return nu; }
                for (var k in r) {
                    if (/^xaxis[0-9]*\.autorange$/.test(k)) { return {"autorange": true, "at": Date.now()}; }
                    var m = k.match(/^xaxis[0-9]*\.range\[([01])\]$/);
                    if (m) { if (m[1] === "0") { lo = r[k]; } else { hi = r[k]; } }
                    if (/^xaxis[0-9]*\.range$/.test(k) && Array.isArray(r[k])) { lo = r[k][0]; hi = r[k][1]; }
                }
                return (lo !== null && hi !== null) ? {"range": [lo, hi], "at": Date.now()} : nu;
            }
        }
    });
})();
