// Metering of the built-ins whose cost grows with the data they touch. QuickJS counts work in
// interrupt polls (one per 10,000 calls and backward jumps), so a loop calling a native
// search over a megabyte string does a gigabyte of work per poll: the budget would never
// see it. Each built-in here is replaced by a wrapper that charges the bytes it touches
// (its receiver, its arguments and what it builds; an element of an array counts as
// ELEMENT_BYTES) to the template's work budget before it runs, and refuses to run once the
// budget is spent. The Rust side (src/lottie/lowering/expressions.rs) converts bytes into the same
// units as the polls.
//
// This script is a function expression evaluated on its own, after the prelude, and called
// once with the Rust charging function: the originals live only in this closure, which no
// expression can reach (expressions see the prelude's scope through direct eval, not this
// one). Everything a wrapper calls at run time is captured here first, so an expression
// replacing a global (Reflect.apply, say) cannot make a wrapper hand it an original.

(function (charge) {
    'use strict';
    var ELEMENT_BYTES = 8;
    var apply = Reflect.apply;
    var construct = Reflect.construct;
    var defineProperty = Object.defineProperty;
    var getPrototypeOf = Object.getPrototypeOf;
    var toNumber = Number;
    var isFinite = globalThis.isFinite;
    var BudgetError = RangeError;

    // What a value costs to touch: a string its length, an array-like its elements.
    function size(value) {
        if (typeof value === 'string') return value.length;
        if (value !== null && typeof value === 'object') {
            var length = value.length;
            if (typeof length === 'number' && length > 0) return length * ELEMENT_BYTES;
            var bytes = value.byteLength;
            if (typeof bytes === 'number' && bytes > 0) return bytes;
        }
        return 0;
    }
    function count(value) {
        var number = toNumber(value);
        return isFinite(number) && number > 0 ? number : 0;
    }
    function pay(bytes) {
        if (!charge(bytes)) throw new BudgetError('the expression work budget is used up');
    }
    // `receiver`: whether `this` is touched whole (a search) or only in part (a slice,
    // charged by what it returns). `extra(this, args)`: what it builds beyond its inputs,
    // charged before it is built.
    function meter(owner, name, receiver, extra) {
        if (owner === undefined || owner === null) return;
        var original = owner[name];
        if (typeof original !== 'function') return;
        var metered = function () {
            var bytes = receiver ? size(this) : 0;
            for (var i = 0; i < arguments.length; i += 1) bytes += size(arguments[i]);
            if (extra) bytes += extra(this, arguments);
            pay(bytes);
            var result = apply(original, this, arguments);
            charge(size(result));
            return result;
        };
        defineProperty(owner, name, { value: metered, writable: true, enumerable: false, configurable: true });
    }
    function meterAll(owner, names, receiver, extra) {
        for (var i = 0; i < names.length; i += 1) meter(owner, names[i], receiver, extra);
    }
    // Constructors allocating (and zero-filling) what their arguments say: `new Uint8Array(1e8)`.
    function meterConstructor(name, elementBytes) {
        var original = globalThis[name];
        if (typeof original !== 'function') return;
        var metered = function () {
            var bytes = 0;
            for (var i = 0; i < arguments.length; i += 1) {
                bytes += typeof arguments[i] === 'number' ? count(arguments[i]) * elementBytes : size(arguments[i]);
            }
            pay(bytes);
            return new.target === undefined ? apply(original, this, arguments)
                : construct(original, arguments, new.target === metered ? original : new.target);
        };
        // The same statics (Symbol.species, `isArray`, `BYTES_PER_ELEMENT`) and the same
        // inherited ones (`Uint8Array.from` comes from %TypedArray%).
        Object.setPrototypeOf(metered, getPrototypeOf(original));
        metered.prototype = original.prototype;
        defineProperty(original.prototype, 'constructor', { value: metered, writable: true, enumerable: false, configurable: true });
        var statics = Reflect.ownKeys(original);
        for (var i = 0; i < statics.length; i += 1) {
            if (statics[i] !== 'prototype' && statics[i] !== 'length' && statics[i] !== 'name') {
                defineProperty(metered, statics[i], Object.getOwnPropertyDescriptor(original, statics[i]));
            }
        }
        defineProperty(globalThis, name, { value: metered, writable: true, enumerable: false, configurable: true });
    }

    var touchingWhole = ['concat', 'endsWith', 'includes', 'indexOf', 'lastIndexOf', 'localeCompare',
        'match', 'matchAll', 'normalize', 'replace', 'replaceAll', 'search', 'split', 'startsWith',
        'toLowerCase', 'toUpperCase', 'toLocaleLowerCase', 'toLocaleUpperCase', 'trim', 'trimStart',
        'trimEnd', 'isWellFormed', 'toWellFormed'];
    meterAll(String.prototype, touchingWhole, true);
    meterAll(String.prototype, ['slice', 'substring', 'substr'], false);
    meter(String.prototype, 'repeat', true, function (text, args) {
        return (typeof text === 'string' ? text.length : 0) * count(args[0]);
    });
    var padding = function (text, args) { return count(args[0]); };
    meter(String.prototype, 'padStart', true, padding);
    meter(String.prototype, 'padEnd', true, padding);
    meterAll(String, ['fromCharCode', 'fromCodePoint', 'raw'], false);

    var arrayWhole = ['concat', 'copyWithin', 'fill', 'flat', 'includes', 'indexOf', 'join',
        'lastIndexOf', 'reverse', 'sort', 'splice', 'toLocaleString', 'toString', 'toReversed',
        'toSorted', 'toSpliced', 'with'];
    meterAll(Array.prototype, arrayWhole, true);
    meter(Array.prototype, 'slice', false);
    meterAll(Array, ['from', 'of'], false);

    var typedArrayPrototype = getPrototypeOf(Uint8Array.prototype);
    meterAll(typedArrayPrototype, ['copyWithin', 'fill', 'includes', 'indexOf', 'join', 'lastIndexOf',
        'reverse', 'set', 'sort', 'toLocaleString', 'toReversed', 'toSorted', 'with'], true);
    meter(typedArrayPrototype, 'slice', false);
    meterAll(getPrototypeOf(Uint8Array), ['from', 'of'], false);
    meter(ArrayBuffer.prototype, 'slice', false);

    meterAll(RegExp.prototype, ['exec', 'test', Symbol.match, Symbol.matchAll, Symbol.replace,
        Symbol.search, Symbol.split], false);
    meter(JSON, 'parse', false);
    meter(JSON, 'stringify', false);

    meterConstructor('Array', ELEMENT_BYTES);
    meterConstructor('ArrayBuffer', 1);
    meterConstructor('SharedArrayBuffer', 1);
    [['Int8Array', 1], ['Uint8Array', 1], ['Uint8ClampedArray', 1], ['Int16Array', 2],
        ['Uint16Array', 2], ['Int32Array', 4], ['Uint32Array', 4], ['Float16Array', 2],
        ['Float32Array', 4], ['Float64Array', 8], ['BigInt64Array', 8], ['BigUint64Array', 8]]
        .forEach(function (entry) { meterConstructor(entry[0], entry[1]); });
})
