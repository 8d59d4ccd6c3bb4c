// The After Effects expression vocabulary Bodymovin templates use, over the template's own
// JSON: evaluated by QuickJS in the render worker (src/lottie/lowering/expressions.rs), never in a
// browser. Everything is deterministic: Math.random and `random()` draw from a generator seeded
// per property and per sample time, `wiggle` is smooth value noise from a hash, Date and
// performance are gone. Units are the JSON's (opacity 0..100, colours 0..1, degrees), as in
// lottie-web.
//
// The Rust side calls `__lottieExpressions.load(json, frameRate)` once, then
// `__lottieExpressions.bake(index, start, step, count)` per expression; the first answers JSON
// text, the second the array of values.
// Non-strict on purpose: expressions assign undeclared variables and are run through direct
// eval inside a scope that holds the vocabulary.

var __lottieExpressions = (function () {
    var FIXED_SEED = 0x5eed1234;
    var MAX_WIGGLE_OCTAVES = 16;
    var MAX_PARENT_DEPTH = 64;
    var frameRate = 60;
    var now = 0;
    var propsByData = new Map();
    var comps = [];
    var compsByName = new Map();
    var found = [];
    var rngState = 1;

    delete globalThis.Date;
    delete globalThis.performance;

    // ---- deterministic numbers ----
    function hash32(a, b, c, d) {
        var h = Math.imul(a ^ 0x9e3779b9, 0x85ebca6b);
        h = Math.imul(h ^ (b >>> 0) ^ (h >>> 13), 0xc2b2ae35);
        h = Math.imul(h ^ (c >>> 0) ^ (h >>> 16), 0x27d4eb2f);
        h = Math.imul(h ^ (d >>> 0) ^ (h >>> 15), 0x165667b1);
        return (h ^ (h >>> 16)) >>> 0;
    }
    function stringHash(text) {
        var h = 2166136261;
        for (var i = 0; i < text.length; i += 1) {
            h = Math.imul(h ^ text.charCodeAt(i), 16777619);
        }
        return h >>> 0;
    }
    function nextRandom() {
        rngState = (rngState + 0x6d2b79f5) | 0;
        var t = Math.imul(rngState ^ (rngState >>> 15), 1 | rngState);
        t = (t + Math.imul(t ^ (t >>> 7), 61 | t)) ^ t;
        return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
    }
    Math.random = nextRandom;

    // ---- values ----
    // Property and loop names in lower case, each lowered once (through the metered built-in):
    // expressions name the same few properties at every frame. Short names only, and only
    // so many, so the cache stays small whatever an expression asks.
    var MAX_LOWERED_NAME_CHARS = 64;
    var MAX_LOWERED_NAMES = 4096;
    var lowered = new Map();
    function lowerCase(text) {
        if (text.length > MAX_LOWERED_NAME_CHARS) return text.toLowerCase();
        var lower = lowered.get(text);
        if (lower !== undefined) return lower;
        lower = text.toLowerCase();
        if (lowered.size < MAX_LOWERED_NAMES) lowered.set(text, lower);
        return lower;
    }
    function isNumerable(v) {
        var t = typeof v;
        return t === 'number' || t === 'boolean' || t === 'string' || v instanceof Number;
    }
    function isVector(v) {
        return v !== null && typeof v === 'object' && !(v instanceof Number) &&
            typeof v.length === 'number';
    }
    function plain(v) {
        if (v instanceof Number || typeof v === 'boolean') return Number(v);
        if (isVector(v)) {
            var out = [];
            for (var i = 0; i < v.length; i += 1) out.push(Number(v[i]));
            return out;
        }
        return v;
    }
    function isPath(v) {
        return v !== null && typeof v === 'object' && !isVector(v) && !(v instanceof Number) &&
            isVector(v.v);
    }
    // Points copied by plain loops, not the metered `map`/`slice`: a path of a thousand
    // vertices is copied several times per frame.
    function copyPoints(list) {
        var out = [];
        for (var i = 0; list && i < list.length; i += 1) {
            var p = list[i];
            out.push(isVector(p) ? [Number(p[0]), Number(p[1])] : [0, 0]);
        }
        return out;
    }
    // `fn` of each element of `list` (an array or array-like), as a new array. A loop rather
    // than `Array.prototype.map`, which makes its result through the array constructor,
    // metered (a call into the budget for every vector sum).
    function mapped(list, fn) {
        var out = [];
        for (var i = 0; i < list.length; i += 1) out.push(fn(list[i], i));
        return out;
    }
    function copy(v) {
        if (isPath(v)) return { c: !!v.c, v: copyPoints(v.v), i: copyPoints(v.i), o: copyPoints(v.o) };
        if (!isVector(v)) return v;
        var out = [];
        for (var i = 0; i < v.length; i += 1) out.push(Number(v[i]));
        return out;
    }
    function elementwise(a, b, op) {
        if (isNumerable(a) && isNumerable(b)) return op(Number(a), Number(b));
        if (isVector(a) && isNumerable(b)) {
            return mapped(a, function (x) { return op(Number(x), Number(b)); });
        }
        if (isNumerable(a) && isVector(b)) {
            return mapped(b, function (x) { return op(Number(a), Number(x)); });
        }
        if (isVector(a) && isVector(b)) {
            var out = [];
            for (var i = 0; i < Math.max(a.length, b.length); i += 1) {
                if (i >= a.length) out.push(Number(b[i]));
                else if (i >= b.length) out.push(Number(a[i]));
                else out.push(op(Number(a[i]), Number(b[i])));
            }
            return out;
        }
        return 0;
    }
    function add(a, b) {
        if (typeof a === 'string' || typeof b === 'string') return a + b;
        return elementwise(a, b, function (x, y) { return x + y; });
    }
    function sub(a, b) { return elementwise(a, b, function (x, y) { return x - y; }); }
    function mul(a, b) { return elementwise(a, b, function (x, y) { return x * y; }); }
    function div(a, b) { return elementwise(a, b, function (x, y) { return x / y; }); }
    function mod(a, b) { return elementwise(a, b, function (x, y) { return x % y; }); }
    function neg(a) { return isVector(a) ? mul(a, -1) : -a; }
    function clamp(v, lo, hi) {
        if (isNumerable(lo) && isNumerable(hi) && Number(lo) > Number(hi)) { var t = lo; lo = hi; hi = t; }
        if (isVector(v)) {
            return mapped(v, function (x, i) {
                var l = isVector(lo) ? lo[i] : lo, h = isVector(hi) ? hi[i] : hi;
                return Math.min(Math.max(Number(x), Number(l)), Number(h));
            });
        }
        return Math.min(Math.max(Number(v), Number(lo)), Number(hi));
    }
    function length(a, b) {
        if (b !== undefined) return length(sub(a, b));
        if (isNumerable(a)) return Math.abs(Number(a));
        var s = 0;
        for (var i = 0; i < a.length; i += 1) s += Number(a[i]) * Number(a[i]);
        return Math.sqrt(s);
    }
    function normalize(v) { var l = length(v); return l === 0 ? mul(v, 0) : div(v, l); }
    function dot(a, b) {
        var s = 0;
        for (var i = 0; i < Math.min(a.length, b.length); i += 1) s += a[i] * b[i];
        return s;
    }
    function cross(a, b) {
        return [a[1] * b[2] - a[2] * b[1], a[2] * b[0] - a[0] * b[2], a[0] * b[1] - a[1] * b[0]];
    }
    function lerp(a, b, p) { return add(a, mul(sub(b, a), p)); }

    // Cubic bezier easing (x1, y1, x2, y2), y for x, as CSS and Lottie define it: the curve's
    // parameter for x by Newton's method (a few steps from t = x on the easings designers
    // use), by bisection where the slope is too flat for it.
    function bezierEase(x1, y1, x2, y2, x) {
        if (x <= 0) return 0;
        if (x >= 1) return 1;
        if (x1 === y1 && x2 === y2) return x;
        // x(t) = ((a t + b) t + c) t
        var c = 3 * x1, b = 3 * (x2 - x1) - c, a = 1 - c - b;
        var t = x;
        for (var n = 0; n < 8; n += 1) {
            var error = ((a * t + b) * t + c) * t - x;
            if (Math.abs(error) < 1e-7) return bezierY(y1, y2, t);
            var slope = (3 * a * t + 2 * b) * t + c;
            if (Math.abs(slope) < 1e-6) break;
            t -= error / slope;
            if (!(t >= 0 && t <= 1)) break;
        }
        var lo = 0, hi = 1;
        t = x;
        for (var i = 0; i < 40; i += 1) {
            var cx = 3 * x1 * t * (1 - t) * (1 - t) + 3 * x2 * t * t * (1 - t) + t * t * t;
            if (Math.abs(cx - x) < 1e-7) break;
            if (cx < x) lo = t; else hi = t;
            t = (lo + hi) / 2;
        }
        return bezierY(y1, y2, t);
    }
    function bezierY(y1, y2, t) {
        return 3 * y1 * t * (1 - t) * (1 - t) + 3 * y2 * t * t * (1 - t) + t * t * t;
    }
    function remap(fn, t, tMin, tMax, v1, v2) {
        if (v1 === undefined) { v1 = tMin; v2 = tMax; tMin = 0; tMax = 1; }
        if (tMax < tMin) { var x = tMax; tMax = tMin; tMin = x; var y = v1; v1 = v2; v2 = y; }
        var p = tMax === tMin ? (t >= tMax ? 1 : 0) : (t - tMin) / (tMax - tMin);
        p = p < 0 ? 0 : p > 1 ? 1 : p;
        return lerp(copy(plain(v1)), copy(plain(v2)), fn(p));
    }
    function linear(t, a, b, c, d) { return remap(function (p) { return p; }, t, a, b, c, d); }
    function ease(t, a, b, c, d) { return remap(function (p) { return bezierEase(0.33, 0, 0.667, 1, p); }, t, a, b, c, d); }
    function easeIn(t, a, b, c, d) { return remap(function (p) { return bezierEase(0.333, 0, 0.833, 0.833, p); }, t, a, b, c, d); }
    function easeOut(t, a, b, c, d) { return remap(function (p) { return bezierEase(0.167, 0.167, 0.667, 1, p); }, t, a, b, c, d); }

    // ---- keyframes ----
    function isKeyframed(data) {
        return Array.isArray(data.k) && data.k.length > 0 && data.k[0] !== null &&
            typeof data.k[0] === 'object' && typeof data.k[0].t === 'number';
    }
    // A keyframe's one-element `s`: a number, or (path properties) the path itself.
    function unwrap(v) {
        if (isVector(v) && v.length === 1 && isPath(v[0])) return v[0];
        return isVector(v) && v.length === 1 && !isVector(v[0]) ? Number(v[0]) : v;
    }
    function normalizedKeyframes(data) {
        var out = [];
        var previousEnd;
        for (var i = 0; i < data.k.length; i += 1) {
            var k = data.k[i];
            var start = k.s !== undefined ? unwrap(k.s) : previousEnd;
            if (start === undefined && out.length) start = out[out.length - 1].s;
            out.push({ t: k.t, s: start, e: k.e !== undefined ? unwrap(k.e) : undefined, h: k.h === 1,
                i: k.i, o: k.o, to: k.to, ti: k.ti });
            previousEnd = out[out.length - 1].e;
        }
        return out;
    }
    function easeComponent(tangent, axis, dim) {
        if (!tangent) return axis === 'x' ? (dim < 0 ? 0 : 0) : 0;
        var v = tangent[axis];
        if (isVector(v)) return Number(v[Math.min(dim, v.length - 1)]);
        return Number(v);
    }
    function interpolatePath(a, b, p) {
        function mix(x, y) {
            return mapped(x, function (pt, i) { return [pt[0] + (y[i][0] - pt[0]) * p, pt[1] + (y[i][1] - pt[1]) * p]; });
        }
        if (!a || !b || a.v.length !== b.v.length) return p < 1 ? a : b;
        return { c: a.c, v: mix(a.v, b.v), i: mix(a.i, b.i), o: mix(a.o, b.o) };
    }
    function valueAtFrame(data, frame) {
        if (!isKeyframed(data)) return copy(unwrap(data.k));
        var kfs = data.__kfs || (data.__kfs = normalizedKeyframes(data));
        if (frame <= kfs[0].t || kfs.length === 1) return copy(kfs[0].s);
        var last = kfs[kfs.length - 1];
        if (frame >= last.t) {
            var before = kfs[kfs.length - 2];
            return copy(last.s !== undefined ? last.s : before.e !== undefined ? before.e : before.s);
        }
        var n = 0;
        while (n < kfs.length - 2 && frame >= kfs[n + 1].t) n += 1;
        var k = kfs[n], next = kfs[n + 1];
        var startValue = k.s, endValue = k.e !== undefined ? k.e : next.s;
        if (k.h || endValue === undefined) return copy(startValue);
        var x = (frame - k.t) / (next.t - k.t);
        if (startValue && startValue.v) {
            var pathEase = bezierEase(easeComponent(k.o, 'x', 0), easeComponent(k.o, 'y', 0),
                easeComponent(k.i, 'x', 0), easeComponent(k.i, 'y', 0), x);
            return interpolatePath(isVector(startValue) ? startValue[0] : startValue,
                isVector(endValue) ? endValue[0] : endValue, pathEase);
        }
        if (!isVector(startValue)) {
            var p = bezierEase(easeComponent(k.o, 'x', 0), easeComponent(k.o, 'y', 0),
                easeComponent(k.i, 'x', 0), easeComponent(k.i, 'y', 0), x);
            return startValue + (endValue - startValue) * p;
        }
        var spatial = isVector(k.to) && isVector(k.ti) && (length(k.to) > 0 || length(k.ti) > 0);
        if (spatial) {
            var e = bezierEase(easeComponent(k.o, 'x', 0), easeComponent(k.o, 'y', 0),
                easeComponent(k.i, 'x', 0), easeComponent(k.i, 'y', 0), x);
            return pointOnCubic(startValue, add(startValue, k.to), add(endValue, k.ti), endValue, e);
        }
        var out = [];
        for (var d = 0; d < startValue.length; d += 1) {
            var pd = bezierEase(easeComponent(k.o, 'x', d), easeComponent(k.o, 'y', d),
                easeComponent(k.i, 'x', d), easeComponent(k.i, 'y', d), x);
            out.push(startValue[d] + ((endValue[d] === undefined ? startValue[d] : endValue[d]) - startValue[d]) * pd);
        }
        return out;
    }
    function cubicAt(p0, p1, p2, p3, t) {
        var u = 1 - t, a = u * u * u, b = 3 * u * u * t, c = 3 * u * t * t, d = t * t * t;
        var n = p0.length;
        if (!(isVector(p0) && p1.length === n && p2.length === n && p3.length === n)) {
            return add(add(mul(p0, a), mul(p1, b)), add(mul(p2, c), mul(p3, d)));
        }
        // Points of one dimension (paths, motion paths): component by component.
        var out = [];
        for (var i = 0; i < n; i += 1) {
            out.push(a * Number(p0[i]) + b * Number(p1[i]) + c * Number(p2[i]) + d * Number(p3[i]));
        }
        return out;
    }
    // The distance between two points of one dimension.
    function distance(a, b) {
        if (!(isVector(a) && isVector(b) && a.length === b.length)) return length(sub(a, b));
        var sum = 0;
        for (var i = 0; i < a.length; i += 1) {
            var d = Number(a[i]) - Number(b[i]);
            sum += d * d;
        }
        return Math.sqrt(sum);
    }
    // The point at a fraction of a cubic's arc length (sampled).
    function pointOnCubic(p0, p1, p2, p3, fraction) {
        var steps = 32, lengths = [0], previous = p0, total = 0;
        for (var s = 1; s <= steps; s += 1) {
            var point = cubicAt(p0, p1, p2, p3, s / steps);
            total += distance(point, previous);
            lengths.push(total);
            previous = point;
        }
        var target = fraction * total;
        for (var j = 1; j <= steps; j += 1) {
            if (lengths[j] >= target || j === steps) {
                var span = lengths[j] - lengths[j - 1];
                var local = span > 0 ? (target - lengths[j - 1]) / span : 0;
                return cubicAt(p0, p1, p2, p3, (j - 1 + local) / steps);
            }
        }
        return copy(p3);
    }

    // ---- properties ----
    function Prop(data, layer, groups, name) {
        this.data = data;
        this.layer = layer;
        this.groups = groups || [];
        this.name = name || '';
        this.cache = new Map();
        this.evaluating = false;
        this.expression = null;
        this.seed = 0;
    }
    // A layer's keyframe times are its composition's frames, its start time (`st`) aside, as
    // lottie-web and rlottie both read them: `st` shifts only a precomposition's contents.
    Prop.prototype.frameAt = function (t) { return t * frameRate; };
    Prop.prototype.preValueAtTime = function (t) { return valueAtFrame(this.data, this.frameAt(t)); };
    // What an expression reads at another time (`valueAtTime`, `velocityAtTime`, `smooth`,
    // `toComp(point, t)`) is the property's keyframes, its expression aside, as lottie-web reads
    // it (and so as designers see it): a chain of layers each reading the previous one a little
    // earlier is one evaluation per layer and frame, not a cascade through every layer before.
    Prop.prototype.valueAtTime = Prop.prototype.preValueAtTime;
    // The value the property shows at `t`, its expression evaluated (once per time: cached).
    // Its own expression reading it sees the keyframes.
    Prop.prototype.evaluatedAt = function (t) {
        if (typeof this.data.x !== 'string' || this.evaluating) return this.preValueAtTime(t);
        var result = this.cache.get(t);
        if (result === undefined) {
            result = this.evaluate(t);
            this.cache.set(t, result);
        }
        return result;
    };
    // The same, a copy the caller may change.
    Prop.prototype.valueAt = function (t) { return copy(this.evaluatedAt(t)); };
    Prop.prototype.evaluate = function (t) {
        if (!this.expression) this.expression = compile(this);
        var savedNow = now, savedState = rngState;
        this.evaluating = true;
        try {
            now = t;
            rngState = hash32(FIXED_SEED, this.seed, Math.round(t * 1000000), 0) | 0;
            var base = this.preValueAtTime(t);
            return conform(plain(this.expression(t, copy(base))), base);
        } finally {
            this.evaluating = false;
            now = savedNow;
            rngState = savedState;
        }
    };
    Prop.prototype.numKeys = function () { return isKeyframed(this.data) ? this.data.k.length : 0; };
    Prop.prototype.key = function (index) {
        if (!isKeyframed(this.data)) throw new Error('the property has no keyframe ' + index);
        var kfs = this.data.__kfs || (this.data.__kfs = normalizedKeyframes(this.data));
        var k = kfs[Math.max(0, Math.min(kfs.length - 1, Math.floor(index) - 1))];
        var v = valueAtFrame(this.data, k.t);
        var result = isVector(v) ? copy(v) : [v];
        result.value = v;
        result.time = k.t / frameRate;
        result.index = index;
        return result;
    };
    Prop.prototype.nearestKey = function (t) {
        var count = this.numKeys();
        if (!count) throw new Error('the property has no keyframes');
        var best = 1, bestDistance = Infinity;
        for (var i = 1; i <= count; i += 1) {
            var d = Math.abs(this.key(i).time - t);
            if (d < bestDistance) { best = i; bestDistance = d; }
        }
        return this.key(best);
    };
    Prop.prototype.loop = function (out, type, count, isDuration) {
        if (!isKeyframed(this.data)) return this.preValueAtTime(now);
        type = type ? lowerCase(String(type)) : 'cycle';
        var kfs = this.data.__kfs || (this.data.__kfs = normalizedKeyframes(this.data));
        var frame = this.frameAt(now);
        var first = kfs[0].t, last = kfs[kfs.length - 1].t;
        var pre = this;
        function at(f) { return pre.preValueAtTime(f / frameRate); }
        if (out) {
            if (frame <= last) return at(frame);
            var startKey;
            if (isDuration) startKey = count ? last - count * frameRate : first;
            else startKey = (!count || count >= kfs.length - 1) ? first : kfs[kfs.length - 1 - count].t;
            var cycle = last - startKey;
            if (cycle <= 0) return at(last);
            var elapsed = frame - startKey;
            var iterations = Math.floor(elapsed / cycle);
            var within = elapsed - iterations * cycle;
            if (type === 'pingpong') return at(iterations % 2 ? last - within : startKey + within);
            if (type === 'offset') return add(mul(sub(at(last), at(startKey)), iterations), at(startKey + within));
            if (type === 'continue') {
                var velocityPerFrame = sub(at(last), at(last - 0.01));
                return add(at(last), mul(velocityPerFrame, (frame - last) / 0.01));
            }
            return at(startKey + within);
        }
        if (frame >= first) return at(frame);
        var endKey;
        if (isDuration) endKey = count ? first + count * frameRate : last;
        else endKey = (!count || count >= kfs.length - 1) ? last : kfs[count].t;
        var span = endKey - first;
        if (span <= 0) return at(first);
        var before = first - frame;
        var laps = Math.floor(before / span);
        var into = before - laps * span;
        if (type === 'pingpong') return at(laps % 2 ? endKey - into : first + into);
        if (type === 'offset') return sub(at(endKey - into), mul(sub(at(endKey), at(first)), laps + 1));
        if (type === 'continue') {
            var v0 = sub(at(first + 0.01), at(first));
            return sub(at(first), mul(v0, (first - frame) / 0.01));
        }
        return at(endKey - into);
    };
    Prop.prototype.velocityAtTime = function (t) {
        var dt = 0.001;
        return div(sub(this.valueAtTime(t + dt), this.valueAtTime(t)), dt);
    };
    Prop.prototype.wiggle = function (freq, amp, octaves, ampMult, t) {
        t = t === undefined ? now : Number(t);
        freq = Number(freq); amp = Number(amp);
        octaves = octaves === undefined ? 1 : Math.max(1, Math.min(MAX_WIGGLE_OCTAVES, Math.floor(octaves)));
        ampMult = ampMult === undefined ? 0.5 : Number(ampMult);
        var base = this.valueAtTime(t);
        function offset(dim) {
            var sum = 0, f = freq, a = amp;
            for (var o = 0; o < octaves; o += 1) {
                var x = t * f, i = Math.floor(x), frac = x - i;
                var r0 = hash32(FIXED_SEED, dim, o, i) / 2147483648 - 1;
                var r1 = hash32(FIXED_SEED, dim, o, i + 1) / 2147483648 - 1;
                var s = frac * frac * (3 - 2 * frac);
                sum += a * (r0 + (r1 - r0) * s);
                f *= 2; a *= ampMult;
            }
            return sum;
        }
        var seed = this.seed;
        if (!isVector(base)) return base + offset(seed);
        return mapped(base, function (v, d) { return v + offset(seed + d + 1); });
    };
    Prop.prototype.smooth = function (width, samples, t) {
        width = width === undefined ? 0.2 : Number(width);
        samples = samples === undefined ? 5 : Math.max(1, Math.min(100, Math.floor(samples)));
        t = t === undefined ? now : Number(t);
        var sum = 0;
        for (var i = 0; i < samples; i += 1) {
            var at = samples === 1 ? t : t - width / 2 + width * i / (samples - 1);
            sum = i === 0 ? this.valueAtTime(at) : add(sum, this.valueAtTime(at));
        }
        return div(sum, samples);
    };
    // A path as plain data ({c, v, i, o}, every point two finite numbers, tangents as many as
    // vertices, missing ones zero), whatever gave it: a path value, a path's interface or
    // createPath.
    function plainPath(path) {
        var vertices = path.v;
        if (!isVector(vertices)) throw new TypeError('the expression gave no path for a path property');
        function points(list) {
            var out = [];
            for (var i = 0; i < vertices.length; i += 1) {
                var p = list && list[i] ? list[i] : [0, 0];
                var point = [Number(p[0]), Number(p[1])];
                check(point);
                out.push(point);
            }
            return out;
        }
        return { c: !!path.c, v: points(vertices), i: points(path.i), o: points(path.o) };
    }
    function conform(result, base) {
        if (isPath(base) || (result && result.v && result.i && result.o)) return plainPath(result || {});
        if (isVector(base)) {
            if (!isVector(result)) throw new TypeError('the expression gave a number for a vector property');
            var out = [];
            for (var i = 0; i < base.length; i += 1) out.push(i < result.length ? Number(result[i]) : base[i]);
            check(out);
            return out;
        }
        if (isVector(result)) result = Number(result[0]);
        check([result]);
        return result;
    }
    function check(values) {
        for (var i = 0; i < values.length; i += 1) {
            if (typeof values[i] !== 'number' || !isFinite(values[i])) {
                throw new TypeError('the expression gave ' + String(values[i]) + ', not a finite number');
            }
        }
    }

    // The value an expression sees when it reads a property: the value, with the property's
    // methods on it (as lottie-web gives them), inherited from the property's prototypes
    // (made once per property, not per read).
    function expressionValue(prop) {
        var v = prop.valueAt(now);
        if (v && v.v && !isVector(v)) return pathInterface(prop);
        if (isVector(v)) return Object.setPrototypeOf(v, prop.prototypes().vector);
        var out = new Number(v);
        return Object.setPrototypeOf(out, prop.prototypes().number);
    }
    // The property's methods for an expression, on `target`.
    function decorate(target, prop) {
        var methods = {
            valueAtTime: function (t) { return prop.valueAtTime(Number(t)); },
            velocityAtTime: function (t) { return prop.velocityAtTime(Number(t)); },
            speedAtTime: function (t) { return length(prop.velocityAtTime(Number(t))); },
            loopOut: function (type, n) { return prop.loop(true, type, n, false); },
            loopIn: function (type, n) { return prop.loop(false, type, n, false); },
            loopOutDuration: function (type, d) { return prop.loop(true, type, d, true); },
            loopInDuration: function (type, d) { return prop.loop(false, type, d, true); },
            wiggle: function (f, a, o, m, t) { return prop.wiggle(f, a, o, m, t); },
            smooth: function (w, s, t) { return prop.smooth(w, s, t); },
            key: function (i) { return prop.key(i); },
            nearestKey: function (t) { return prop.nearestKey(Number(t)); },
            propertyGroup: function (n) {
                n = n === undefined ? 1 : n;
                var group = prop.groups[n - 1];
                if (!group) throw new Error('no property group ' + n);
                return group;
            },
            propertyIndex: 1
        };
        for (var name in methods) target[name] = methods[name];
        Object.defineProperty(target, 'value', { get: function () { return plain(prop.valueAt(now)); }, configurable: true });
        Object.defineProperty(target, 'velocity', { get: function () { return prop.velocityAtTime(now); }, configurable: true });
        Object.defineProperty(target, 'speed', { get: function () { return length(prop.velocityAtTime(now)); }, configurable: true });
        Object.defineProperty(target, 'numKeys', { get: function () { return prop.numKeys(); }, configurable: true });
        Object.defineProperty(target, 'name', { value: prop.name, configurable: true });
        return target;
    }
    // Prototypes of the values an expression reads from this property: a vector's (an array's
    // prototype under the methods) and a number's.
    Prop.prototype.prototypes = function () {
        if (!this.protos) {
            this.protos = {
                vector: decorate(Object.create(Array.prototype), this),
                number: decorate(Object.create(Number.prototype), this)
            };
        }
        return this.protos;
    };

    // ---- paths ----
    // The path now (its expression evaluated), or at time `t` (its keyframes).
    function pathAt(prop, t) {
        var v = t === undefined ? prop.valueAt(now) : prop.valueAtTime(Number(t));
        return isVector(v) ? v[0] : v;
    }
    function pathSegments(path) {
        var segments = [], count = path.v.length;
        var closed = !!path.c;
        for (var i = 0; i < (closed ? count : count - 1); i += 1) {
            var j = (i + 1) % count;
            segments.push([path.v[i], add(path.v[i], path.o[i]), add(path.v[j], path.i[j]), path.v[j]]);
        }
        return segments;
    }
    function pathPoint(path, fraction, derivative) {
        fraction = clamp(Number(fraction === undefined ? 0.5 : fraction), 0, 1);
        var segments = pathSegments(path);
        if (!segments.length) return path.v.length ? copy(path.v[0]) : [0, 0];
        var lengths = mapped(segments, function (s) {
            var total = 0, previous = s[0];
            for (var k = 1; k <= 16; k += 1) {
                var p = cubicAt(s[0], s[1], s[2], s[3], k / 16);
                total += distance(p, previous);
                previous = p;
            }
            return total;
        });
        var total = lengths.reduce(function (a, b) { return a + b; }, 0);
        var target = fraction * total;
        for (var i = 0; i < segments.length; i += 1) {
            if (target <= lengths[i] || i === segments.length - 1) {
                var local = lengths[i] > 0 ? Math.min(1, target / lengths[i]) : 0;
                var s = segments[i];
                if (derivative) {
                    var a = pointOnCubic(s[0], s[1], s[2], s[3], Math.max(0, local - 0.001));
                    var b = pointOnCubic(s[0], s[1], s[2], s[3], Math.min(1, local + 0.001));
                    return normalize(sub(b, a));
                }
                return pointOnCubic(s[0], s[1], s[2], s[3], local);
            }
            target -= lengths[i];
        }
        return copy(path.v[0]);
    }
    function pathInterface(prop) {
        var iface = {
            points: function (t) { return mapped(pathAt(prop, t).v, copy); },
            inTangents: function (t) { return mapped(pathAt(prop, t).i, copy); },
            outTangents: function (t) { return mapped(pathAt(prop, t).o, copy); },
            isClosed: function () { return !!pathAt(prop).c; },
            pointOnPath: function (p, t) { return pathPoint(pathAt(prop, t), p, false); },
            tangentOnPath: function (p, t) { return pathPoint(pathAt(prop, t), p, true); },
            normalOnPath: function (p, t) {
                var tangent = pathPoint(pathAt(prop, t), p, true);
                return [tangent[1], -tangent[0]];
            },
            createPath: createPath
        };
        decorate(iface, prop);
        Object.defineProperty(iface, 'v', { get: function () { return pathAt(prop).v; } });
        Object.defineProperty(iface, 'i', { get: function () { return pathAt(prop).i; } });
        Object.defineProperty(iface, 'o', { get: function () { return pathAt(prop).o; } });
        Object.defineProperty(iface, 'c', { get: function () { return !!pathAt(prop).c; } });
        return iface;
    }
    function createPath(points, inTangents, outTangents, closed) {
        points = copyPoints(points);
        function tangents(list) {
            var out = copyPoints(list);
            while (out.length < points.length) out.push([0, 0]);
            return out.slice(0, points.length);
        }
        return { v: points, i: tangents(inTangents), o: tangents(outTangents), c: closed === undefined ? true : !!closed };
    }

    // ---- interfaces: groups, layers, comps ----
    function callable(lookup, props) {
        var fn = function (key) {
            var found = lookup(key);
            if (found === undefined) throw new Error('no property ' + String(key));
            return found;
        };
        for (var k in props) {
            if (Object.prototype.hasOwnProperty.call(props, k)) {
                Object.defineProperty(fn, k, Object.getOwnPropertyDescriptor(props, k));
            }
        }
        return fn;
    }
    function propOf(data, layer, groups, name) {
        var prop = propsByData.get(data);
        if (!prop) {
            prop = new Prop(data, layer, groups, name);
            propsByData.set(data, prop);
        }
        return prop;
    }
    // Names After Effects and Bodymovin use for a property → its key in the JSON.
    var TRANSFORM_KEYS = {
        'position': 'p', 'adbe position': 'p', 2: 'p', 'anchorpoint': 'a', 'anchor point': 'a',
        'adbe anchor point': 'a', 1: 'a', 'scale': 's', 'adbe scale': 's', 6: 's',
        'rotation': 'r', 'adbe rotate z': 'r', 'zrotation': 'r', 10: 'r', 'opacity': 'o',
        'adbe opacity': 'o', 11: 'o', 'skew': 'sk', 'skewaxis': 'sa',
        'xrotation': 'rx', 'adbe rotate x': 'rx', 'yrotation': 'ry', 'adbe rotate y': 'ry',
        'orientation': 'or'
    };
    var SHAPE_KEYS = {
        'size': 's', 'position': 'p', 'roundness': 'r', 'color': 'c', 'opacity': 'o',
        'strokewidth': 'w', 'stroke width': 'w', 'start': 's', 'end': 'e', 'offset': 'o',
        'startpoint': 's', 'endpoint': 'e', 'copies': 'c', 'radius': 'r', 'points': 'pt',
        'rotation': 'r', 'innerradius': 'ir', 'outerradius': 'or', 'innerroundness': 'is',
        'outerroundness': 'os', 'highlightlength': 'h', 'highlightangle': 'a',
        'adbe vector trim start': 's', 'adbe vector trim end': 'e', 'adbe vector trim offset': 'o',
        'adbe vector fill color': 'c', 'adbe vector fill opacity': 'o', 'adbe vector stroke color': 'c',
        'adbe vector stroke opacity': 'o', 'adbe vector stroke width': 'w',
        'adbe vector ellipse size': 's', 'adbe vector ellipse position': 'p',
        'adbe vector rect size': 's', 'adbe vector rect position': 'p', 'adbe vector rect roundness': 'r'
    };
    // The names of SHAPE_KEYS a shape's interface has as properties (`size`, `color`, not
    // `adbe vector …`), found once here rather than by a (metered) regular expression each
    // time a shape is read.
    var SHAPE_PROPERTY_NAMES = Object.keys(SHAPE_KEYS).filter(function (name) { return /^[a-z]+$/.test(name); });
    function transformInterface(data, layer, parentGroups) {
        var groups;
        // The property `key` names: a property, the parts of a separated position (an
        // array), or undefined.
        function propFor(key) {
            var json = TRANSFORM_KEYS[typeof key === 'string' ? lowerCase(key) : key];
            if (json === 'r' && !data.r && data.rz) json = 'rz';
            if (json === 'p' && data.p && data.p.s) {
                var parts = [];
                for (var i = 0; i < 3; i += 1) {
                    var axis = 'xyz'[i];
                    if (data.p[axis]) parts.push(propOf(data.p[axis], layer, groups, axis + 'Position'));
                }
                return parts;
            }
            if (!json || !data[json]) return undefined;
            return propOf(data[json], layer, groups, String(key));
        }
        function get(key) {
            var prop = propFor(key);
            if (Array.isArray(prop)) return separatedPosition(prop);
            return prop ? expressionValue(prop) : undefined;
        }
        function axis(i) {
            var part = data.p && data.p.s ? data.p['xyz'[i]] : undefined;
            return part ? expressionValue(propOf(part, layer, groups, ['xPosition', 'yPosition', 'zPosition'][i])) : get('position')[i];
        }
        var iface = Object.setPrototypeOf(callable(get, {}), TRANSFORM_PROTOTYPE);
        Object.defineProperty(iface, '__propFor', { value: propFor });
        Object.defineProperty(iface, '__get', { value: get });
        Object.defineProperty(iface, '__axis', { value: axis });
        groups = chain([iface], parentGroups);
        return iface;
    }
    // `head` followed by `rest`: a property's groups, innermost first (a loop, not the metered
    // `concat`).
    function chain(head, rest) {
        var out = head;
        for (var i = 0; i < rest.length; i += 1) out.push(rest[i]);
        return out;
    }
    // The named properties of every transform interface, found by its own `__get`: one
    // prototype, rather than fourteen getters made for each layer.
    var TRANSFORM_PROTOTYPE = Object.create(Function.prototype);
    ['position', 'anchorPoint', 'scale', 'rotation', 'opacity', 'skew', 'skewAxis',
        'xRotation', 'yRotation', 'zRotation', 'orientation'].forEach(function (name) {
        Object.defineProperty(TRANSFORM_PROTOTYPE, name, { get: function () { return this.__get(name); }, enumerable: true });
    });
    ['xPosition', 'yPosition', 'zPosition'].forEach(function (name, i) {
        Object.defineProperty(TRANSFORM_PROTOTYPE, name, { get: function () { return this.__axis(i); }, enumerable: true });
    });
    function separatedPosition(parts) {
        var v = mapped(parts, function (part) { return Number(part.valueAt(now)); });
        v.valueAtTime = function (t) { return mapped(parts, function (part) { return Number(part.valueAtTime(Number(t))); }); };
        return v;
    }
    // Interfaces of effects and of shapes are made once each (per effect, per shape) and kept:
    // an expression reads them at every frame.
    function effectsInterface(effects, layer, layerGroups) {
        var parade;
        var made = new Map();
        function effectGroup(effect, index) {
            if (made.has(effect)) return made.get(effect);
            var groups;
            function get(key) {
                var list = effect.ef || [];
                for (var i = 0; i < list.length; i += 1) {
                    var item = list[i];
                    if (item.nm === key || item.mn === key || i + 1 === key) {
                        if (item.ty === 5) return effectGroup(item, i + 1);
                        return item.v ? expressionValue(propOf(item.v, layer, groups, item.nm)) : undefined;
                    }
                }
                return undefined;
            }
            var iface = callable(get, { numProperties: (effect.ef || []).length, active: effect.en !== 0,
                propertyIndex: index });
            Object.defineProperty(iface, 'name', { value: effect.nm || '', configurable: true });
            groups = chain([iface, parade], layerGroups);
            made.set(effect, iface);
            return iface;
        }
        parade = callable(function (key) {
            for (var i = 0; i < effects.length; i += 1) {
                var effect = effects[i];
                if (effect.nm === key || effect.mn === key || i + 1 === key) return effectGroup(effect, i + 1);
            }
            return undefined;
        }, { numProperties: effects.length });
        parade.__group = effectGroup;
        return parade;
    }
    function contentsInterface(items, layer, parentGroups) {
        var contents;
        var made = new Map();
        var visible = items.filter(function (s) { return s.ty !== 'tr'; });
        function item(shape, index) {
            if (made.has(shape)) return made.get(shape);
            var groups, inner, transform;
            function innerContents() {
                return inner || (inner = contentsInterface(shape.it || [], layer, groups));
            }
            function get(key) {
                var lower = typeof key === 'string' ? lowerCase(key) : key;
                if (shape.ty === 'gr') {
                    if (lower === 'contents' || lower === 'adbe vectors group' || lower === 2) {
                        return innerContents();
                    }
                    if (lower === 'transform' || lower === 'adbe vector transform group') {
                        var tr = (shape.it || []).filter(function (s) { return s.ty === 'tr'; })[0];
                        if (tr && !transform) transform = transformInterface(tr, layer, groups);
                        return tr ? transform : undefined;
                    }
                    return innerContents()(key);
                }
                if (shape.ty === 'sh' && (lower === 'path' || lower === 'shape' || lower === 'adbe vector shape' || lower === 2)) {
                    return expressionValue(propOf(shape.ks, layer, groups, 'Path'));
                }
                var json = SHAPE_KEYS[lower];
                if (json && shape[json] && typeof shape[json] === 'object') {
                    return expressionValue(propOf(shape[json], layer, groups, String(key)));
                }
                return undefined;
            }
            var extra = { propertyIndex: index };
            var iface = callable(get, extra);
            Object.defineProperty(iface, 'name', { value: shape.nm || '', configurable: true });
            groups = chain([iface, contents], parentGroups);
            made.set(shape, iface);
            if (shape.ty === 'gr') {
                Object.defineProperty(iface, 'content', { value: innerContents() });
                Object.defineProperty(iface, 'transform', { get: function () { return get('transform'); } });
            }
            if (shape.ty === 'sh') Object.defineProperty(iface, 'path', { get: function () { return get('path'); } });
            SHAPE_PROPERTY_NAMES.forEach(function (name) {
                if (!(name in iface)) {
                    var json = SHAPE_KEYS[name];
                    if (shape[json] && typeof shape[json] === 'object' && shape[json].k !== undefined) {
                        Object.defineProperty(iface, name, { get: function () { return get(name); } });
                    }
                }
            });
            if (shape.ty === 'st' || shape.ty === 'gs') {
                Object.defineProperty(iface, 'strokeWidth', { get: function () { return get('strokewidth'); } });
            }
            if (shape.ty === 'gf' || shape.ty === 'gs') {
                Object.defineProperty(iface, 'startPoint', { get: function () { return get('startpoint'); } });
                Object.defineProperty(iface, 'endPoint', { get: function () { return get('endpoint'); } });
            }
            return iface;
        }
        contents = callable(function (key) {
            for (var i = 0; i < visible.length; i += 1) {
                if (visible[i].nm === key || visible[i].mn === key || i + 1 === key) return item(visible[i], i + 1);
            }
            return undefined;
        }, { numProperties: visible.length });
        contents.__item = item;
        return contents;
    }

    function Layer(comp, data, position) {
        this.comp = comp;
        this.data = data;
        this.position = position;
        this.st = typeof data.st === 'number' ? data.st : 0;
        this.iface = null;
    }
    Layer.prototype.parentLayer = function () {
        if (typeof this.data.parent !== 'number') return null;
        return this.comp.layerByIndex().get(this.data.parent) || null;
    };
    // The 2D affine matrix [a, b, c, d, e, f] of this layer's transform: now, of the values
    // its expressions give (as the layer is drawn), or at time `t`, of its keyframes (as
    // lottie-web's `toComp(point, t)` reads them).
    Layer.prototype.matrixAt = function (t) {
        var ks = this.data.ks || {};
        var tr = this.interface().transform;
        function at(prop) { return t === undefined ? prop.valueAt(now) : prop.valueAtTime(t); }
        function val(name, fallback) {
            var prop = tr.__propFor(name);
            if (prop === undefined) return fallback;
            if (Array.isArray(prop)) return mapped(prop, function (part) { return Number(at(part)); });
            return at(prop);
        }
        var p = ks.p ? val('position', [0, 0]) : [0, 0];
        var a = ks.a ? val('anchorPoint', [0, 0]) : [0, 0];
        var s = ks.s ? val('scale', [100, 100]) : [100, 100];
        var r = (ks.r || ks.rz) ? Number(val('rotation', 0)) : 0;
        var rad = r * Math.PI / 180, cos = Math.cos(rad), sin = Math.sin(rad);
        var sx = s[0] / 100, sy = s[1] / 100;
        var m = [cos * sx, sin * sx, -sin * sy, cos * sy, 0, 0];
        m[4] = p[0] - (m[0] * a[0] + m[2] * a[1]);
        m[5] = p[1] - (m[1] * a[0] + m[3] * a[1]);
        return m;
    };
    Layer.prototype.worldMatrixAt = function (t) {
        var m = this.matrixAt(t), layer = this.parentLayer(), depth = 0;
        while (layer && depth < MAX_PARENT_DEPTH) {
            var q = layer.matrixAt(t);
            m = [q[0] * m[0] + q[2] * m[1], q[1] * m[0] + q[3] * m[1],
                q[0] * m[2] + q[2] * m[3], q[1] * m[2] + q[3] * m[3],
                q[0] * m[4] + q[2] * m[5] + q[4], q[1] * m[4] + q[3] * m[5] + q[5]];
            layer = layer.parentLayer();
            depth += 1;
        }
        return m;
    };
    function applyMatrix(m, point, inverse) {
        var x = Number(point[0]), y = Number(point[1]);
        var out;
        if (inverse) {
            var det = m[0] * m[3] - m[1] * m[2];
            if (det === 0) throw new Error('the layer transform cannot be inverted');
            var dx = x - m[4], dy = y - m[5];
            out = [(m[3] * dx - m[2] * dy) / det, (-m[1] * dx + m[0] * dy) / det];
        } else {
            out = [m[0] * x + m[2] * y + m[4], m[1] * x + m[3] * y + m[5]];
        }
        if (point.length > 2) out.push(Number(point[2]));
        return out;
    }
    Layer.prototype.interface = function () {
        if (this.iface) return this.iface;
        var layer = this, data = this.data, iface;
        var groups = [];
        var transform, effects, contents;
        function get(key) {
            var lower = typeof key === 'string' ? lowerCase(key) : key;
            if (lower === 'adbe root vectors group' || lower === 'contents' || lower === 2) return contents;
            if (lower === 'adbe transform group' || lower === 'transform' || lower === 1 || lower === 6) return transform;
            if (lower === 'adbe effect parade' || lower === 'effects' || lower === 4) return effects;
            return undefined;
        }
        var props = {};
        iface = callable(get, props);
        groups.push(iface);
        transform = transformInterface(data.ks || {}, layer, groups);
        effects = effectsInterface(data.ef || [], layer, groups);
        contents = contentsInterface(data.shapes || [], layer, groups);
        Object.defineProperty(iface, 'name', { value: data.nm || '', configurable: true });
        Object.defineProperty(iface, 'transform', { value: transform });
        ['position', 'anchorPoint', 'scale', 'rotation', 'opacity'].forEach(function (name) {
            Object.defineProperty(iface, name, { get: function () { return transform[name]; } });
        });
        iface.effect = effects;
        iface.content = contents;
        iface.index = data.ind;
        iface.inPoint = (data.ip || 0) / frameRate;
        iface.outPoint = (data.op || 0) / frameRate;
        iface.startTime = layer.st / frameRate;
        iface.width = data.w !== undefined ? data.w : data.sw;
        iface.height = data.h !== undefined ? data.h : data.sh;
        iface.active = data.hd !== true;
        iface.enabled = data.hd !== true;
        Object.defineProperty(iface, 'hasParent', { get: function () { return !!layer.parentLayer(); } });
        Object.defineProperty(iface, 'parent', {
            get: function () { var p = layer.parentLayer(); return p ? p.interface() : undefined; }
        });
        if (data.tm) {
            Object.defineProperty(iface, 'timeRemap', { get: function () { return expressionValue(propOf(data.tm, layer, groups, 'Time Remap')); } });
        }
        iface.toComp = function (point, t) { return applyMatrix(layer.worldMatrixAt(t === undefined ? t : Number(t)), point, false); };
        iface.toWorld = iface.toComp;
        iface.fromComp = function (point, t) { return applyMatrix(layer.worldMatrixAt(t === undefined ? t : Number(t)), point, true); };
        iface.fromWorld = iface.fromComp;
        iface.toCompVec = function (v, t) {
            var m = layer.worldMatrixAt(t === undefined ? t : Number(t));
            return [m[0] * v[0] + m[2] * v[1], m[1] * v[0] + m[3] * v[1]];
        };
        iface.mask = function (key) { throw new Error('mask() is not supported'); };
        this.iface = iface;
        return iface;
    };

    function Comp(id, name, data, layerList) {
        var comp = this;
        this.id = id;
        this.layers = (layerList || []).map(function (d, position) { return new Layer(comp, d, position); });
        this.byName = null;
        this.byIndex = null;
        this.iface = {
            // The first layer named `key` or of index `key`.
            layer: function (key) {
                var named = comp.layerByName().get(key), indexed = comp.layerByIndex().get(key);
                var found = named && indexed ? (named.position < indexed.position ? named : indexed) : named || indexed;
                if (!found) throw new Error('no layer ' + String(key));
                return found.interface();
            },
            numLayers: this.layers.length,
            width: data.w,
            height: data.h,
            frameDuration: 1 / frameRate,
            duration: ((data.op || 0) - (data.ip || 0)) / frameRate,
            displayStartTime: 0,
            name: name || id || ''
        };
    }
    // The composition's layers by name and by index (`ind`), the first of each, made on first use.
    function firstByKey(layers, key) {
        var map = new Map();
        for (var i = 0; i < layers.length; i += 1) {
            var value = layers[i].data[key];
            if (!map.has(value)) map.set(value, layers[i]);
        }
        return map;
    }
    Comp.prototype.layerByName = function () { return this.byName || (this.byName = firstByKey(this.layers, 'nm')); };
    Comp.prototype.layerByIndex = function () { return this.byIndex || (this.byIndex = firstByKey(this.layers, 'ind')); };

    // ---- evaluation ----
    function compile(prop) {
        var source = prop.data.x;
        var layer = prop.layer;
        var thisLayer = layer.interface();
        var thisComp = layer.comp.iface;
        var thisProperty = decorate({}, prop);
        Object.defineProperty(thisProperty, 'value', { get: function () { return plain(prop.preValueAtTime(now)); } });
        var time = 0, value, $bm_transform, transform = thisLayer.transform;
        $bm_transform = transform;
        var content = thisLayer.content, effect = thisLayer.effect;
        var index = thisLayer.index, name = thisLayer.name;
        var inPoint = thisLayer.inPoint, outPoint = thisLayer.outPoint, startTime = thisLayer.startTime;
        var width = thisLayer.width, height = thisLayer.height;
        var hasParent = thisLayer.hasParent, parent = thisLayer.parent;
        var toComp = thisLayer.toComp, fromComp = thisLayer.fromComp;
        var toWorld = thisLayer.toWorld, fromWorld = thisLayer.fromWorld, fromCompToSurface = fromComp;
        var anchorPoint, position, scale, rotation, opacity;
        var numKeys = prop.numKeys();
        var velocity;
        var $bm_sum = add, sum = add, $bm_sub = sub, $bm_mul = mul, $bm_div = div, $bm_mod = mod;
        var $bm_neg = neg;
        var $bm_isInstanceOfArray = isVector;
        var radiansToDegrees = function (v) { return v * 180 / Math.PI; };
        var degreesToRadians = function (v) { return v * Math.PI / 180; };
        var radians_to_degrees = radiansToDegrees, degrees_to_radians = degreesToRadians;
        var loopOut = thisProperty.loopOut, loop_out = loopOut, loopIn = thisProperty.loopIn, loop_in = loopIn;
        var loopOutDuration = thisProperty.loopOutDuration, loopInDuration = thisProperty.loopInDuration;
        var valueAtTime = thisProperty.valueAtTime, velocityAtTime = thisProperty.velocityAtTime;
        var smooth = thisProperty.smooth, key = thisProperty.key, nearestKey = thisProperty.nearestKey;
        var wiggle = function (f, a, o, m, t) { return prop.wiggle(f, a, o, m, t === undefined ? time : t); };
        var random = function (a, b) {
            if (a === undefined) return nextRandom();
            if (b === undefined) { b = a; a = isVector(b) ? mul(b, 0) : 0; }
            if (isVector(b)) {
                var r = nextRandom();
                return mapped(b, function (x, i) { return a[i] + r * (x - a[i]); });
            }
            return Number(a) + nextRandom() * (Number(b) - Number(a));
        };
        var gaussRandom = function (a, b) {
            var g = Math.sqrt(-2 * Math.log(1 - nextRandom())) * Math.cos(2 * Math.PI * nextRandom());
            g = Math.max(-1, Math.min(1, g / 3));
            if (a === undefined) return (g + 1) / 2;
            if (b === undefined) { b = a; a = 0; }
            return Number(a) + (g + 1) / 2 * (Number(b) - Number(a));
        };
        var noise = function (v) {
            var x = isVector(v) ? Number(v[0]) : Number(v), i = Math.floor(x), f = x - i;
            var r0 = hash32(FIXED_SEED, 7, 0, i) / 2147483648 - 1, r1 = hash32(FIXED_SEED, 7, 0, i + 1) / 2147483648 - 1;
            return r0 + (r1 - r0) * f * f * (3 - 2 * f);
        };
        var seedRandom = function (seed, timeless) {
            rngState = hash32(FIXED_SEED, prop.seed, Number(seed) | 0, timeless ? 0 : Math.round(time * 1000000)) | 0;
        };
        var framesToTime = function (f, fps) { return f / (fps || frameRate); };
        var timeToFrames = function (t, fps) { return (t === undefined ? time : t) * (fps || frameRate); };
        var posterizeTime = function (fps) {
            time = fps ? Math.floor(time * fps) / fps : 0;
            value = prop.preValueAtTime(time);
        };
        var comp = function (key) {
            var found = compsByName.get(key);
            if (!found) throw new Error('no composition ' + String(key));
            return found.iface;
        };
        var lookAt = function (from, at) {
            var f = sub(at, from);
            var pitch = Math.atan2(f[0], Math.sqrt(f[1] * f[1] + f[2] * f[2])) * 180 / Math.PI;
            var yaw = -Math.atan2(f[1], f[2]) * 180 / Math.PI;
            return [yaw, pitch, 0];
        };
        var rgbToHsl = function (c) {
            var r = c[0], g = c[1], b = c[2], max = Math.max(r, g, b), min = Math.min(r, g, b);
            var h = 0, s = 0, l = (max + min) / 2;
            if (max !== min) {
                var d = max - min;
                s = l > 0.5 ? d / (2 - max - min) : d / (max + min);
                if (max === r) h = (g - b) / d + (g < b ? 6 : 0);
                else if (max === g) h = (b - r) / d + 2;
                else h = (r - g) / d + 4;
                h /= 6;
            }
            return [h, s, l, c[3] === undefined ? 1 : c[3]];
        };
        var hslToRgb = function (c) {
            var h = c[0], s = c[1], l = c[2];
            function hue(p, q, t) {
                if (t < 0) t += 1;
                if (t > 1) t -= 1;
                if (t < 1 / 6) return p + (q - p) * 6 * t;
                if (t < 1 / 2) return q;
                if (t < 2 / 3) return p + (q - p) * (2 / 3 - t) * 6;
                return p;
            }
            if (s === 0) return [l, l, l, c[3] === undefined ? 1 : c[3]];
            var q = l < 0.5 ? l * (1 + s) : l + s - l * s, p = 2 * l - q;
            return [hue(p, q, h + 1 / 3), hue(p, q, h), hue(p, q, h - 1 / 3), c[3] === undefined ? 1 : c[3]];
        };
        var run;
        if (source.indexOf('$bm_rt') >= 0) {
            // Declared here as lottie-web does: an expression may assign `$bm_rt` without its
            // own `var` (hand-written ones do).
            run = eval('(function () {\nvar $bm_rt;\n' + source + '\n;return $bm_rt;\n})');
        } else {
            // An After Effects expression as written (no Bodymovin `$bm_rt`): its value is the
            // completion value of its last statement. One expression (`wiggle(2, 10)`,
            // `time * 100`, most hand-written ones) is compiled once into a function returning
            // it; statements are parsed again at each evaluation by eval (which gives that
            // completion value). A source starting with a brace or a declaration reads
            // differently as an expression: statements. Trailing semicolons end the one
            // statement (`wiggle(2, 10);`) and are left out. The source must also compile as
            // statements on its own, so that no parenthesis of it closes the wrapper's.
            var single = source.trim();
            while (single[single.length - 1] === ';') single = single.slice(0, -1).trimEnd();
            if (!(single[0] === '{' || single.indexOf('function') === 0 || single.indexOf('class') === 0)) {
                try {
                    eval('(function () {\n' + source + '\n})');
                    run = eval('(function () {\nreturn (\n' + single + '\n);\n})');
                } catch (error) {
                    if (!(error instanceof SyntaxError)) throw error;
                }
            }
            if (!run) run = function () { return eval(source); };
        }
        return function (t, v) {
            time = t;
            value = v;
            return run();
        };
    }

    // The JSON pointer of `parts` (keys and indices, `~` and `/` escaped).
    function pointerOf(parts) {
        var pointer = '';
        for (var i = 0; i < parts.length; i += 1) {
            var part = String(parts[i]);
            if (part.indexOf('~') >= 0 || part.indexOf('/') >= 0) part = part.replace(/~/g, '~0').replace(/\//g, '~1');
            pointer += '/' + part;
        }
        return pointer;
    }
    // Visits every property with an expression under `node`, with the keys leading to it
    // (`parts`, a stack: its pointer is made only for what is visited).
    // Only objects and arrays are walked into (most values of a template are numbers).
    function walk(node, parts, visit) {
        if (typeof node.x === 'string' && node.k !== undefined) {
            visit(node, pointerOf(parts));
            return;
        }
        var i, child;
        if (Array.isArray(node)) {
            for (i = 0; i < node.length; i += 1) {
                child = node[i];
                if (typeof child !== 'object' || child === null) continue;
                parts.push(i);
                walk(child, parts, visit);
                parts.pop();
            }
            return;
        }
        var keys = Object.keys(node);
        for (i = 0; i < keys.length; i += 1) {
            child = node[keys[i]];
            if (typeof child !== 'object' || child === null || keys[i] === '__kfs') continue;
            parts.push(keys[i]);
            walk(child, parts, visit);
            parts.pop();
        }
    }
    function groupsFor(layer, pointer, layerPointer) {
        // The property groups of a property, innermost first, as far as the path tells them.
        var iface = layer.interface();
        var rest = pointer.slice(layerPointer.length).split('/').slice(1);
        if (rest[0] === 'ks') return [iface.transform, iface];
        if (rest[0] === 'ef' && rest.length >= 3) {
            var effect = layer.data.ef[Number(rest[1])];
            return [iface.effect.__group(effect, Number(rest[1]) + 1), iface.effect, iface];
        }
        return [iface];
    }
    function load(json, rate) {
        frameRate = rate;
        var root = JSON.parse(json);
        comps = [];
        compsByName = new Map();
        propsByData = new Map();
        found = [];
        var rootComp = new Comp('', root.nm, root, root.layers);
        comps.push({ comp: rootComp, pointer: '/layers', id: null });
        compsByName.set(root.nm || '', rootComp);
        (root.assets || []).forEach(function (asset, index) {
            if (!Array.isArray(asset.layers)) return;
            var comp = new Comp(asset.id, asset.nm, asset, asset.layers);
            comps.push({ comp: comp, pointer: '/assets/' + index + '/layers', id: asset.id });
            compsByName.set(asset.nm || asset.id, comp);
            if (asset.id !== undefined) compsByName.set(asset.id, comp);
        });
        var descriptors = [];
        comps.forEach(function (entry) {
            entry.comp.layers.forEach(function (layer, layerIndex) {
                var layerPointer = entry.pointer + '/' + layerIndex;
                walk(layer.data, layerPointer.split('/').slice(1), function (data, pointer) {
                    var rest = pointer.slice(layerPointer.length);
                    var unsupported = null;
                    if (layer.data.ty === 5 && rest.indexOf('/t/') === 0) unsupported = 'text properties';
                    var groups = groupsFor(layer, pointer, layerPointer);
                    var prop = propOf(data, layer, groups, '');
                    prop.groups = groups;
                    prop.seed = stringHash(pointer);
                    found.push(prop);
                    descriptors.push({ path: pointer, comp: entry.id, unsupported: unsupported });
                });
            });
        });
        return JSON.stringify(descriptors);
    }

    function bake(index, start, step, count) {
        var prop = found[index];
        var out = [];
        for (var i = 0; i < count; i += 1) {
            var frame = start + i * step;
            // The cached value itself: serialised before any expression runs again.
            out.push(plain(prop.evaluatedAt(frame / frameRate)));
        }
        // The values stay cached: later expressions reading this property reuse them. The Rust
        // side serialises them itself (QuickJS's C API), not through the global JSON, which
        // the metering charges and an expression may replace.
        return out;
    }

    return { load: load, bake: bake };
})();
