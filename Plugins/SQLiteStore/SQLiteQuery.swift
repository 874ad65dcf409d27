// FetchRequest -> SQL, with RecordPredicate's semantics (the in-memory `matches` is the
// reference):
//
// - Every leaf yields 0 or 1, never SQL NULL, so NOT / AND / OR stay two-valued: `==` and `!=`
//   are `IS` / `IS NOT` (null-aware); orderings and text matches are guarded by
//   `col IS NOT NULL AND ...`; `.among` with a null in the list adds `col IS NULL`.
// - Strings compare with SQLite's BINARY collation, which is memcmp of the UTF-8 bytes, as
//   `Value.compare` does. Text matches run on `CAST(col AS BLOB)`, where `substr`, `length`
//   and `instr` count bytes, not characters; case-insensitive matches fold with `lower()`,
//   which without ICU (Debian's build has none) folds ASCII letters only, like the reference.
// - Integers and doubles compare numerically; an integer compared with a double attribute is
//   bound as a Double, as `Value.compare` converts it.
// - A to-one relationship is `col IS ?`; a to-many one holding an id is
//   `concord_holds_id(col, ?)`; an empty one is `col IS NULL`.
// - `.idAfter` is `id > ?` (BLOB memcmp, the order of `ObjectID` within one entity).
// - Order: the sort keys (SQLite puts NULL first ascending and last descending, as
//   `Value.compare` does), then `id`.
import Foundation
import Persistence

/// A statement's SQL and the values bound to its parameters, in order.
struct SQLQuery {
    var sql: String
    var bindings: [SQLiteBinding]
}

enum SQLTranslation {
    /// `SELECT <columns> FROM <table> WHERE ... ORDER BY ... LIMIT ... OFFSET ...`.
    static func select(_ request: FetchRequest, _ layout: EntityLayout) -> SQLQuery {
        var bindings: [SQLiteBinding] = []
        let condition = whereClause(request.predicate, layout, &bindings)
        var sql = "SELECT \(layout.selectList) FROM \(layout.quotedTable)"
        if condition != "1" { sql += " WHERE " + condition }
        sql += " ORDER BY "
        for sort in request.sortDescriptors {
            sql += quoted(sort.key) + (sort.ascending ? " ASC, " : " DESC, ")
        }
        sql += "id"
        if request.fetchLimit != nil || request.fetchOffset > 0 {
            sql += " LIMIT ? OFFSET ?"
            bindings.append(.integer(request.fetchLimit.map(Int64.init) ?? -1))
            bindings.append(.integer(Int64(request.fetchOffset)))
        }
        return SQLQuery(sql: sql, bindings: bindings)
    }

    /// `SELECT count(*) FROM <table> WHERE ...` (limit and offset ignored).
    static func count(_ request: FetchRequest, _ layout: EntityLayout) -> SQLQuery {
        var bindings: [SQLiteBinding] = []
        let condition = whereClause(request.predicate, layout, &bindings)
        var sql = "SELECT count(*) FROM \(layout.quotedTable)"
        if condition != "1" { sql += " WHERE " + condition }
        return SQLQuery(sql: sql, bindings: bindings)
    }

    /// The predicate as an SQL expression that is always 0 or 1.
    static func whereClause(
        _ predicate: RecordPredicate,
        _ layout: EntityLayout,
        _ bindings: inout [SQLiteBinding]
    ) -> String {
        switch predicate {
        case .constant(let value):
            return value ? "1" : "0"

        case .comparison(let key, let comparison, let value):
            let column = quoted(key)
            let type = layout.entity.attribute(key)?.type ?? .string
            if value.isNaN {
                // `Value.compare` orders NaN after every value and equal to none.
                switch comparison {
                case .equal, .less, .lessOrEqual: return "0"
                case .notEqual: return "1"
                case .greater, .greaterOrEqual: return "(\(column) IS NOT NULL)"
                }
            }
            switch comparison {
            case .equal, .notEqual:
                let negated = comparison == .notEqual
                if value == .null { return "(\(column) IS \(negated ? "NOT " : "")NULL)" }
                bindings.append(SQLiteBinding(value, as: type, forStorage: false))
                // `col = ?` guarded by IS NOT NULL (rather than `col IS ?`) keeps the
                // expression two-valued and lets SQLite use an index on `col`.
                return negated ? "(\(column) IS NOT ?)" : "(\(column) IS NOT NULL AND \(column) = ?)"
            default:
                if value == .null { return "0" }
                let op: String
                switch comparison {
                case .less: op = "<"
                case .lessOrEqual: op = "<="
                case .greater: op = ">"
                default: op = ">="
                }
                bindings.append(SQLiteBinding(value, as: type, forStorage: false))
                return "(\(column) IS NOT NULL AND \(column) \(op) ?)"
            }

        case .among(let key, let values):
            let column = quoted(key)
            let type = layout.entity.attribute(key)?.type ?? .string
            let nonNull = values.filter { $0 != .null && !$0.isNaN }
            var parts: [String] = []
            if values.contains(.null) { parts.append("\(column) IS NULL") }
            if !nonNull.isEmpty {
                bindings += PlaceholderList.padded(nonNull.map { SQLiteBinding($0, as: type, forStorage: false) })
                parts.append(
                    "(\(column) IS NOT NULL AND \(column) IN (" + PlaceholderList.text(for: nonNull.count) + "))"
                )
            }
            return parts.isEmpty ? "0" : "(" + parts.joined(separator: " OR ") + ")"

        case .text(let key, let match, let text, let caseInsensitive):
            let column = quoted(key)
            let needle = caseInsensitive ? Data(text.utf8.map { $0 >= 65 && $0 <= 90 ? $0 + 32 : $0 }) : Data(text.utf8)
            if needle.isEmpty { return "(\(column) IS NOT NULL)" }
            let haystack = caseInsensitive ? "CAST(lower(\(column)) AS BLOB)" : "CAST(\(column) AS BLOB)"
            switch match {
            case .beginsWith:
                // The length guard also keeps substr from returning NULL for an empty string.
                bindings += [.integer(Int64(needle.count)), .integer(Int64(needle.count)), .blob(needle)]
                return "(\(column) IS NOT NULL AND length(\(haystack)) >= ? AND substr(\(haystack), 1, ?) = ?)"
            case .endsWith:
                bindings += [.integer(Int64(needle.count)), .integer(Int64(-needle.count)), .blob(needle)]
                return "(\(column) IS NOT NULL AND length(\(haystack)) >= ? AND substr(\(haystack), ?) = ?)"
            case .contains:
                bindings.append(.blob(needle))
                return "(\(column) IS NOT NULL AND instr(\(haystack), ?) > 0)"
            }

        case .relationship(let key, let target):
            let column = quoted(key)
            guard let target else { return "(\(column) IS NULL)" }
            bindings.append(.uuid(target.uuid))
            if layout.entity.relationship(key)?.isToMany == true {
                return "(concord_holds_id(\(column), ?) = 1)"
            }
            return "(\(column) IS NOT NULL AND \(column) = ?)"

        case .ids(let ids):
            let mine = ids.filter { $0.entity == layout.entity.name }
            if mine.isEmpty { return "0" }
            bindings += PlaceholderList.padded(mine.map { .uuid($0.uuid) })
            return "(id IN (" + PlaceholderList.text(for: mine.count) + "))"

        case .idAfter(let id):
            if id.entity != layout.entity.name {
                return id.entity.utf8.lexicographicallyPrecedes(layout.entity.name.utf8) ? "1" : "0"
            }
            bindings.append(.uuid(id.uuid))
            return "(id > ?)"

        case .and(let predicates):
            if predicates.isEmpty { return "1" }
            return "(" + predicates.map { whereClause($0, layout, &bindings) }.joined(separator: " AND ") + ")"

        case .or(let predicates):
            if predicates.isEmpty { return "0" }
            return "(" + predicates.map { whereClause($0, layout, &bindings) }.joined(separator: " OR ") + ")"

        case .not(let predicate):
            return "(NOT " + whereClause(predicate, layout, &bindings) + ")"
        }
    }
}

extension Value {
    /// Whether this is a NaN double (or a date at NaN seconds).
    var isNaN: Bool {
        switch self {
        case .double(let number): return number.isNaN
        case .date(let date): return date.timeIntervalSinceReferenceDate.isNaN
        default: return false
        }
    }
}

/// `concord_holds_id(blob, id)`: whether the sorted, concatenated 16-byte ids in `blob` include
/// `id` (0 for NULL).
func blobHoldsID(_ blob: Data, _ id: Data) -> Bool {
    guard id.count == 16, blob.count % 16 == 0 else { return false }
    return blob.withUnsafeBytes { haystack in
        id.withUnsafeBytes { needle in
            // Sorted: binary search over the 16-byte entries.
            var low = 0
            var high = haystack.count / 16
            while low < high {
                let mid = (low + high) / 2
                let entry = UnsafeRawBufferPointer(rebasing: haystack[(mid * 16)..<(mid * 16 + 16)])
                if entry.elementsEqual(needle) { return true }
                if entry.lexicographicallyPrecedes(needle) { low = mid + 1 } else { high = mid }
            }
            return false
        }
    }
}
