import Foundation
import Persistence

/// How the checks compare what a store gives back with what was committed.
///
/// - Strings are the same when their UTF-8 bytes are (not Swift's canonical equivalence: `"é"`
///   precomposed and `"e\u{301}"` are different values to every store).
/// - Doubles are the same when their bits are (so `-0.0` is not `0.0`); NaN matches NaN. An
///   integer given to a double attribute may come back as the equal double.
/// - Dates are the same within a microsecond (``Value/date(_:)`` promises nanoseconds, but a
///   `Date` near today carries only about a tenth of a microsecond, so a conversion to
///   nanoseconds since 1970 and back may move the last bits).
/// - Checks about something else than round trips (fetch semantics, paging, sharing) let
///   `-0.0` and `0.0` pass for each other, so that one lost sign (which the round-trip checks
///   report) does not hide every other difference.
/// - A `null` value and a missing one are the same; so are an empty to-many set and a missing
///   one.
enum RecordComparison {
    /// The largest difference between two dates that counts as the same date.
    static let dateTolerance: TimeInterval = 1e-6

    static func same(_ a: Value, _ b: Value, zeroSign: Bool = true) -> Bool {
        switch (a, b) {
        case (.string(let x), .string(let y)): return x.utf8.elementsEqual(y.utf8)
        case (.double(let x), .double(let y)):
            return x.bitPattern == y.bitPattern || (x.isNaN && y.isNaN) || (!zeroSign && x == 0 && y == 0)
        case (.integer(let x), .double(let y)), (.double(let y), .integer(let x)):
            return Double(x) == y && Int64(exactly: y) == x
        case (.date(let x), .date(let y)):
            return x == y || abs(x.timeIntervalSinceReferenceDate - y.timeIntervalSinceReferenceDate) <= dateTolerance
        default: return a == b
        }
    }

    static func normalized(_ record: Record) -> Record {
        var record = record
        record.values = record.values.filter { $0.value != .null }
        record.toMany = record.toMany.filter { !$0.value.isEmpty }
        return record
    }

    /// What differs between the two, or `nil` when they are the same record.
    static func difference(expected: Record, actual: Record, zeroSign: Bool = true) -> String? {
        let expected = normalized(expected)
        let actual = normalized(actual)
        var differences: [String] = []
        if expected.id != actual.id { differences.append("id \(expected.id) vs \(actual.id)") }
        for key in Set(expected.values.keys).union(actual.values.keys).sorted()
        where !same(expected[key], actual[key], zeroSign: zeroSign) {
            differences.append("\(key): expected \(describe(expected[key])), got \(describe(actual[key]))")
        }
        for key in Set(expected.toOne.keys).union(actual.toOne.keys).sorted()
        where expected.toOne[key] != actual.toOne[key] {
            differences.append(
                "\(key): expected \(expected.toOne[key].map(\.description) ?? "nil"), got \(actual.toOne[key].map(\.description) ?? "nil")"
            )
        }
        for key in Set(expected.toMany.keys).union(actual.toMany.keys).sorted()
        where expected.toMany[key] != actual.toMany[key] {
            differences.append(
                "\(key): expected \(describe(expected.toMany[key])), got \(describe(actual.toMany[key]))"
            )
        }
        return differences.isEmpty ? nil : "\(expected.id): " + differences.joined(separator: "; ")
    }

    /// What differs between two sets of records (by id, in any order), or `nil`.
    static func difference(expected: [Record], actual: [Record], zeroSign: Bool = true) -> String? {
        var problems: [String] = []
        let actualByID = Dictionary(actual.map { ($0.id, $0) }, uniquingKeysWith: { first, _ in first })
        if actualByID.count != actual.count {
            problems.append("the store returned \(actual.count - actualByID.count) duplicate record(s)")
        }
        let expectedIDs = Set(expected.map(\.id))
        for record in expected.sorted(by: { $0.id < $1.id }) {
            guard let other = actualByID[record.id] else {
                problems.append("missing \(describe(record))")
                continue
            }
            if let difference = difference(expected: record, actual: other, zeroSign: zeroSign) {
                problems.append(difference)
            }
        }
        for record in actual.sorted(by: { $0.id < $1.id }) where !expectedIDs.contains(record.id) {
            problems.append("unexpected \(describe(record))")
        }
        if problems.isEmpty { return nil }
        let shown = problems.prefix(8).joined(separator: "\n    ")
        return problems.count > 8 ? shown + "\n    ... and \(problems.count - 8) more" : shown
    }

    static func describe(_ value: Value) -> String {
        switch value {
        case .string(let text):
            return
                "\"\(text.unicodeScalars.map { $0.isASCII && $0.value >= 32 ? String($0) : "\\u{\(String($0.value, radix: 16))}" }.joined())\""
        case .double(let number):
            return "double(\(number)\(number == 0 && number.sign == .minus ? ", negative zero" : ""))"
        case .integer(let number): return "integer(\(number))"
        case .date(let date): return "date(\(date.timeIntervalSinceReferenceDate) since 2001)"
        case .data(let data): return "data(\(data.map { String(format: "%02x", $0) }.joined()))"
        default: return value.description
        }
    }

    static func describe(_ targets: Set<ObjectID>?) -> String {
        guard let targets, !targets.isEmpty else { return "[]" }
        return "[" + targets.sorted().map(\.description).joined(separator: ", ") + "]"
    }

    static func describe(_ record: Record) -> String {
        let record = normalized(record)
        var parts = record.values.keys.sorted().map { "\($0): \(describe(record[$0]))" }
        parts += record.toOne.keys.sorted().map { "\($0): \(record.toOne[$0]!)" }
        parts += record.toMany.keys.sorted().map { "\($0): \(describe(record.toMany[$0]))" }
        return "\(record.id) {\(parts.joined(separator: ", "))}"
    }
}
