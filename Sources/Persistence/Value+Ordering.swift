import Foundation

extension Value: ExpressibleByStringLiteral, ExpressibleByIntegerLiteral, ExpressibleByFloatLiteral,
    ExpressibleByBooleanLiteral
{
    /// A string value.
    public init(stringLiteral value: String) { self = .string(value) }
    /// An integer value.
    public init(integerLiteral value: Int64) { self = .integer(value) }
    /// A double value.
    public init(floatLiteral value: Double) { self = .double(value) }
    /// A boolean value.
    public init(booleanLiteral value: Bool) { self = .boolean(value) }
}

extension Value {
    /// How two values order in fetches, the same in every store: `null` before everything;
    /// strings by their UTF-8 bytes (SQLite's `BINARY` collation); numbers by value, integers
    /// and doubles compared with each other; `false` before `true`; dates by time; data and
    /// UUIDs by their bytes. `nil` when the two cannot be compared (a string and a date, say).
    public func compare(to other: Value) -> ComparisonResult? {
        func order<T: Comparable>(_ a: T, _ b: T) -> ComparisonResult {
            a < b ? .orderedAscending : (a == b ? .orderedSame : .orderedDescending)
        }
        func bytes(_ a: some Sequence<UInt8>, _ b: some Sequence<UInt8>) -> ComparisonResult {
            var left = a.makeIterator()
            var right = b.makeIterator()
            while true {
                switch (left.next(), right.next()) {
                case (nil, nil): return .orderedSame
                case (nil, _): return .orderedAscending
                case (_, nil): return .orderedDescending
                case (let x?, let y?): if x != y { return x < y ? .orderedAscending : .orderedDescending }
                }
            }
        }
        switch (self, other) {
        case (.null, .null): return .orderedSame
        case (.null, _): return .orderedAscending
        case (_, .null): return .orderedDescending
        case (.string(let a), .string(let b)): return bytes(a.utf8, b.utf8)
        case (.integer(let a), .integer(let b)): return order(a, b)
        case (.double(let a), .double(let b)): return order(a, b)
        case (.integer(let a), .double(let b)): return order(Double(a), b)
        case (.double(let a), .integer(let b)): return order(a, Double(b))
        case (.boolean(let a), .boolean(let b)): return order(a ? 1 : 0, b ? 1 : 0)
        case (.date(let a), .date(let b)): return order(a, b)
        case (.data(let a), .data(let b)): return bytes(a, b)
        case (.uuid(let a), .uuid(let b)):
            return withUnsafeBytes(of: a.uuid) { x in withUnsafeBytes(of: b.uuid) { y in bytes(x, y) } }
        default: return nil
        }
    }

    /// Whether a value of this kind may be stored in an attribute of `type` (integers are
    /// accepted for doubles).
    public func fits(_ type: AttributeType) -> Bool {
        switch (self, type) {
        case (.null, _): return true
        case (.integer, .double): return true
        default: return self.type == type
        }
    }
}
