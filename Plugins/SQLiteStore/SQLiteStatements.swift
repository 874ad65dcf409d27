// The hot paths: binding values to, and reading records from, prepared statements through the
// sqlite3 C API. GRDB prepares and caches the statements and runs the transactions; the rows
// themselves go straight through sqlite3_bind_* / sqlite3_step / sqlite3_column_*, with no
// per-row argument arrays or row objects.
import Foundation
import GRDB
import GRDBSQLite
import Persistence

/// SQLite's "copy the bytes now" destructor, which the C macro `SQLITE_TRANSIENT` spells.
nonisolated(unsafe) let transientDestructor = unsafeBitCast(
    OpaquePointer(bitPattern: -1),
    to: sqlite3_destructor_type.self
)

/// One value bound to a statement parameter, already in its column's storage class.
enum SQLiteBinding: Sendable, Hashable {
    case null
    case integer(Int64)
    case double(Double)
    case text(String)
    case blob(Data)
    case uuid(UUID)

    /// `value` as an attribute of `type` stores it. NaN, which SQLite turns into NULL, is stored
    /// as the 8 bytes of its bit pattern, big-endian; predicates bind plain doubles
    /// (`forStorage: false`).
    init(_ value: Value, as type: AttributeType, forStorage: Bool = true) {
        switch value {
        case .null: self = .null
        case .string(let text): self = .text(text)
        case .integer(let number): self = type == .double ? .double(Double(number)) : .integer(number)
        case .double(let number): self = forStorage ? .real(number) : .double(number)
        case .boolean(let flag): self = .integer(flag ? 1 : 0)
        case .date(let date):
            self =
                forStorage ? .real(date.timeIntervalSinceReferenceDate) : .double(date.timeIntervalSinceReferenceDate)
        case .data(let bytes): self = .blob(bytes)
        case .uuid(let uuid): self = .uuid(uuid)
        }
    }

    /// A double to store: as REAL, unless it is NaN.
    static func real(_ number: Double) -> SQLiteBinding {
        if number.isNaN {
            return .blob(withUnsafeBytes(of: number.bitPattern.bigEndian) { Data($0) })
        }
        return .double(number)
    }

    @inline(__always)
    func bind(to statement: OpaquePointer, at index: Int32) -> Int32 {
        switch self {
        case .null: return sqlite3_bind_null(statement, index)
        case .integer(let number): return sqlite3_bind_int64(statement, index, number)
        case .double(let number): return sqlite3_bind_double(statement, index, number)
        case .text(let text): return bindText(text, statement, index)
        case .blob(let bytes): return bindData(bytes, statement, index)
        case .uuid(let uuid): return bindUUID(uuid, statement, index)
        }
    }
}

@inline(__always)
func bindText(_ text: String, _ statement: OpaquePointer, _ index: Int32) -> Int32 {
    var text = text
    return text.withUTF8 { bytes in
        guard let base = bytes.baseAddress else { return sqlite3_bind_text(statement, index, "", 0, nil) }
        return sqlite3_bind_text(
            statement,
            index,
            UnsafeRawPointer(base).assumingMemoryBound(to: CChar.self),
            Int32(bytes.count),
            transientDestructor
        )
    }
}

@inline(__always)
func bindData(_ data: Data, _ statement: OpaquePointer, _ index: Int32) -> Int32 {
    if data.isEmpty { return sqlite3_bind_zeroblob(statement, index, 0) }
    return data.withUnsafeBytes {
        sqlite3_bind_blob(statement, index, $0.baseAddress, Int32($0.count), transientDestructor)
    }
}

@inline(__always)
func bindUUID(_ uuid: UUID, _ statement: OpaquePointer, _ index: Int32) -> Int32 {
    withUnsafeBytes(of: uuid.uuid) { sqlite3_bind_blob(statement, index, $0.baseAddress, 16, transientDestructor) }
}

/// The bytes of a to-many set: the targets' UUIDs sorted and concatenated (`nil` when empty).
func toManyBlob(_ targets: Set<ObjectID>) -> Data? {
    if targets.isEmpty { return nil }
    // Each UUID as two big-endian halves: sorting the pairs sorts the bytes.
    var halves: [(UInt64, UInt64)] = []
    halves.reserveCapacity(targets.count)
    for target in targets {
        halves.append(
            withUnsafeBytes(of: target.uuid.uuid) {
                (
                    UInt64(bigEndian: $0.loadUnaligned(as: UInt64.self)),
                    UInt64(bigEndian: $0.loadUnaligned(fromByteOffset: 8, as: UInt64.self))
                )
            }
        )
    }
    halves.sort { $0.0 != $1.0 ? $0.0 < $1.0 : $0.1 < $1.1 }
    var bytes = [UInt8](repeating: 0, count: halves.count * 16)
    bytes.withUnsafeMutableBytes { buffer in
        for (index, pair) in halves.enumerated() {
            buffer.storeBytes(of: pair.0.bigEndian, toByteOffset: index * 16, as: UInt64.self)
            buffer.storeBytes(of: pair.1.bigEndian, toByteOffset: index * 16 + 8, as: UInt64.self)
        }
    }
    return Data(bytes)
}

/// Why a statement failed, as a ``PersistenceError`` naming the store.
func statementError(_ code: Int32, _ connection: OpaquePointer?, url: URL, doing what: String) -> PersistenceError {
    let message =
        connection.flatMap { sqlite3_errmsg($0) }.map { String(cString: $0) } ?? String(cString: sqlite3_errstr(code))
    let primary = code & 0xff
    let kind: PersistenceError.Code = primary == SQLITE_CORRUPT || primary == SQLITE_NOTADB ? .corruptStore : .ioFailed
    return PersistenceError(kind, "\(what) failed: \(message) (SQLite code \(code))", url: url)
}

/// What turning rows of one entity into records needs, made once per statement run: a
/// dictionary holding every attribute name, and where each attribute sits in it.
struct RowDecoder {
    struct Slot {
        let name: String
        let type: AttributeType
        let index: Dictionary<String, Value>.Index
    }

    let layout: EntityLayout
    let template: [String: Value]
    let slots: [Slot]

    init(_ layout: EntityLayout) {
        self.layout = layout
        var template = [String: Value](minimumCapacity: layout.attributeCount)
        for attribute in layout.entity.attributes { template[attribute.name] = .null }
        self.template = template
        slots = layout.entity.attributes.map {
            Slot(name: $0.name, type: $0.type, index: template.index(forKey: $0.name)!)
        }
    }
}

/// A cached statement used through the C API: bound, stepped, and reset when done.
struct RawStatement {
    let pointer: OpaquePointer
    let connection: OpaquePointer?
    let url: URL

    init(_ db: Database, sql: String, url: URL) throws {
        pointer = try db.cachedStatement(sql: sql).sqliteStatement
        connection = db.sqliteConnection
        self.url = url
        sqlite3_reset(pointer)
        sqlite3_clear_bindings(pointer)
    }

    @inline(__always)
    func check(_ code: Int32, _ what: @autoclosure () -> String) throws(PersistenceError) {
        if code != SQLITE_OK { throw statementError(code, connection, url: url, doing: what()) }
    }

    @inline(__always)
    func bind(_ bindings: [SQLiteBinding], from first: Int32 = 1) throws(PersistenceError) {
        var index = first
        for binding in bindings {
            try check(binding.bind(to: pointer, at: index), "binding a value")
            index += 1
        }
    }

    /// Runs a statement that returns no rows, then resets it.
    @inline(__always)
    func run(_ what: String) throws(PersistenceError) {
        let code = sqlite3_step(pointer)
        sqlite3_reset(pointer)
        if code != SQLITE_DONE && code != SQLITE_ROW { throw statementError(code, connection, url: url, doing: what) }
    }

    /// Steps to the next row: `true` for a row, `false` at the end.
    @inline(__always)
    func step(_ what: String) throws(PersistenceError) -> Bool {
        let code = sqlite3_step(pointer)
        if code == SQLITE_ROW { return true }
        if code == SQLITE_DONE { return false }
        sqlite3_reset(pointer)
        throw statementError(code, connection, url: url, doing: what)
    }

    func finish() {
        sqlite3_reset(pointer)
        sqlite3_clear_bindings(pointer)
    }

    // MARK: Reading columns

    @inline(__always)
    func isNull(_ index: Int32) -> Bool { sqlite3_column_type(pointer, index) == SQLITE_NULL }

    @inline(__always)
    func uuid(_ index: Int32) -> UUID? {
        guard sqlite3_column_bytes(pointer, index) == 16, let bytes = sqlite3_column_blob(pointer, index) else {
            return nil
        }
        return UUID(uuid: bytes.loadUnaligned(as: uuid_t.self))
    }

    @inline(__always)
    func data(_ index: Int32) -> Data {
        let count = Int(sqlite3_column_bytes(pointer, index))
        guard count > 0, let bytes = sqlite3_column_blob(pointer, index) else { return Data() }
        return Data(bytes: bytes, count: count)
    }

    @inline(__always)
    func text(_ index: Int32) -> String {
        guard let bytes = sqlite3_column_text(pointer, index) else { return "" }
        let count = Int(sqlite3_column_bytes(pointer, index))
        return String(decoding: UnsafeBufferPointer(start: bytes, count: count), as: UTF8.self)
    }

    /// A REAL column's double, or one stored as its bit pattern (see ``SQLiteBinding/real(_:)``).
    @inline(__always)
    func real(_ index: Int32) -> Double {
        if sqlite3_column_type(pointer, index) == SQLITE_BLOB, sqlite3_column_bytes(pointer, index) == 8,
            let bytes = sqlite3_column_blob(pointer, index)
        {
            return Double(bitPattern: UInt64(bigEndian: bytes.loadUnaligned(as: UInt64.self)))
        }
        return sqlite3_column_double(pointer, index)
    }

    /// The attribute value in column `index`, as an attribute of `type`.
    @inline(__always)
    func value(_ index: Int32, _ type: AttributeType) -> Value {
        switch sqlite3_column_type(pointer, index) {
        case SQLITE_NULL: return .null
        default: break
        }
        switch type {
        case .string: return .string(text(index))
        case .integer: return .integer(sqlite3_column_int64(pointer, index))
        case .double: return .double(real(index))
        case .boolean: return .boolean(sqlite3_column_int64(pointer, index) != 0)
        case .date: return .date(Date(timeIntervalSinceReferenceDate: real(index)))
        case .data: return .data(data(index))
        case .uuid: return uuid(index).map(Value.uuid) ?? .null
        }
    }

    /// The record in the current row, laid out as `decoder.layout` says (columns `id`, then its
    /// columns).
    @inline(__always)
    func record(_ decoder: RowDecoder) throws(PersistenceError) -> Record {
        let layout = decoder.layout
        guard let uuid = uuid(0) else {
            throw PersistenceError(
                .corruptStore,
                "a row of \(layout.entity.name) has an id that is not 16 bytes",
                url: url
            )
        }
        // The attribute values: a copy of the template (same hash layout, so no key is hashed
        // again), its values overwritten in place by index; null columns are removed after.
        var values = decoder.template
        var nulls = 0
        var index: Int32 = 1
        for slot in decoder.slots {
            let value = value(index, slot.type)
            if case .null = value {
                nulls += 1
            } else {
                values.values[slot.index] = value
            }
            index += 1
        }
        if nulls > 0 {
            index = 1
            for slot in decoder.slots {
                if isNull(index) { values.removeValue(forKey: slot.name) }
                index += 1
            }
        }
        var toOne: [String: ObjectID] = [:]
        var toMany: [String: Set<ObjectID>] = [:]
        if layout.toOneCount + layout.toManyCount > 0 {
            for column in layout.columns[layout.attributeCount...] {
                defer { index += 1 }
                if isNull(index) { continue }
                switch column.kind {
                case .attribute:
                    continue
                case .toOne(let destination):
                    if let target = self.uuid(index) {
                        toOne[column.name] = ObjectID(entity: destination, uuid: target)
                    }
                case .toMany(let destination):
                    let count = Int(sqlite3_column_bytes(pointer, index)) / 16
                    guard count > 0, let bytes = sqlite3_column_blob(pointer, index) else { continue }
                    var targets = Set<ObjectID>(minimumCapacity: count)
                    for offset in 0..<count {
                        targets.insert(
                            ObjectID(
                                entity: destination,
                                uuid: UUID(uuid: bytes.loadUnaligned(fromByteOffset: offset * 16, as: uuid_t.self))
                            )
                        )
                    }
                    toMany[column.name] = targets
                }
            }
        }
        return Record(
            id: ObjectID(entity: layout.entity.name, uuid: uuid),
            values: values,
            toOne: toOne,
            toMany: toMany
        )
    }

    // MARK: Binding records

    /// Binds `record`'s full row (id, then every column) for the insert statement.
    @inline(__always)
    func bindRow(_ record: Record, _ layout: EntityLayout) throws(PersistenceError) {
        try check(bindUUID(record.id.uuid, pointer, 1), "binding an id")
        var index: Int32 = 2
        for column in layout.columns {
            let code: Int32
            switch column.kind {
            case .attribute(let type):
                if let value = record.values[column.name] {
                    code = SQLiteBinding(value, as: type).bind(to: pointer, at: index)
                } else {
                    code = sqlite3_bind_null(pointer, index)
                }
            case .toOne:
                if let target = record.toOne[column.name] {
                    code = bindUUID(target.uuid, pointer, index)
                } else {
                    code = sqlite3_bind_null(pointer, index)
                }
            case .toMany:
                if let targets = record.toMany[column.name], let blob = toManyBlob(targets) {
                    code = bindData(blob, pointer, index)
                } else {
                    code = sqlite3_bind_null(pointer, index)
                }
            }
            try check(code, "binding \(layout.entity.name).\(column.name)")
            index += 1
        }
    }
}

/// `IN` lists of placeholders come in a few lengths (powers of two), padded by repeating the last
/// value, which changes no result: every statement stays in GRDB's cache for the connection's
/// life, and lists of every length from 1 to 500 made hundreds of statements of up to tens of
/// kilobytes each (an import of 300,000 records grew by 40 MB that way).
enum PlaceholderList {
    /// The list length that holds `count` values.
    static func length(for count: Int) -> Int {
        count <= 1 ? 1 : 1 << (Int.bitWidth - (count - 1).leadingZeroBitCount)
    }

    /// `?, ?, …` for `count` values (padded).
    static func text(for count: Int) -> String {
        Array(repeating: "?", count: length(for: count)).joined(separator: ", ")
    }

    /// `values` padded to the list's length by repeating the last one.
    static func padded<C: Collection>(_ values: C) -> [C.Element] {
        var array = Array(values)
        guard let last = array.last else { return array }
        array += repeatElement(last, count: length(for: array.count) - array.count)
        return array
    }
}
