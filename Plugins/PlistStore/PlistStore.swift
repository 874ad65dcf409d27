// PlistStore: a Concord store kept as one property list file (binary by default), read whole
// and replaced whole.
//
// This file is also a template: it uses only the public API of Persistence, so you can copy it
// to write a store plugin of your own on top of `WholeFileStore`.
//
// File format, version 1 (dictionaries are written with their keys in byte order, so equal
// contents give equal bytes):
//
//     <dict>
//       format          "concord.store"
//       formatVersion   1
//       metadata        <dict> entries <dict> key → <data> </dict>
//                              schemaVersion <integer>
//                              storeIdentifier "<lowercase uuid>" </dict>
//       records         <dict> "<Entity>" → <array> of <dict>
//                                  "@id" → "<lowercase uuid>", "<property>" → value, ... </dict>
//       schema          `Schema`'s Codable form, validated again when read
//     </dict>
//
// - `records` has one array per entity of the schema (empty ones included), each sorted by id
//   (the order of `ObjectID`: the UUID's bytes, which is also the order of the lowercase hex).
//   A record's id is its `"@id"` (so an attribute may be called `"id"`; `"@id"` is reserved).
// - Property values are typed by the schema, so they carry no type tags: string → <string>;
//   integer → <integer> (all of Int64); double → <real> (every double, NaN and infinities
//   included); boolean → <true/>/<false/>; date → <date>; data → <data>; uuid → lowercase
//   <string>; to-one → the target's UUID; to-many → an <array> of the targets' UUIDs, sorted;
//   `null` and empty relationships → the key is absent.
// - Binary (`bplist00`) by default, written by the small writer at the end of this file:
//   Foundation's `PropertyListEncoder` shares objects that compare equal, and in Swift
//   `-0.0 == 0.0` and `"é" == "e\u{301}"`, so it would turn one into the other. The writer
//   shares only dictionary keys. `StoreOptions.settings["format"] == "xml"` writes XML through
//   `PropertyListEncoder` instead (XML shares nothing); reading accepts both. Binary keeps every date exactly; XML property lists on Linux
//   keep dates only to whole seconds (the sub-second part is dropped, rounding toward the
//   past: 12345.678 s reads back as 12345 s), and dates far outside years 1–9999 come back
//   wrong (1e15 s after 2001 read back as about 1.6e13 s), so use XML only for files people read.
//
// Reading never trusts the file: anything that is not a binary or XML property list (garbage,
// a truncated file, an empty file, an OpenStep-style plist) is `PersistenceError.Code.corruptStore`;
// a JSON file, or a property list without the `format` = `concord.store` marker, is
// `.notAStore`; a value of the wrong type, an id that is not a UUID, a duplicate id, a record
// of an entity or a property the file's schema lacks, or an invalid schema is `.corruptStore`
// naming the entity, the property and the id. XML nested deeper than 128 levels is refused
// before parsing (Foundation's XML property list parser recurses without a bound and would
// overflow the stack); binary property lists are read lazily, only as deep as the format goes.
import Foundation
import Persistence

/// A store kept as one property list file that is read whole and replaced whole, registered as
/// `"plist"`.
///
/// It promises everything ``WholeFileStore`` promises (atomic, durable commits that re-read
/// other writers' changes first; presenting its file; following moves; tearing down on
/// deletion), and a file format that is deterministic (the same contents give the same bytes).
/// Files are binary property lists unless `options.settings["format"]` is `"xml"`; binary
/// files round-trip every value exactly, while **XML property lists keep dates only to whole
/// seconds on Linux** (sub-second parts are dropped). Its files open only as plist stores: any
/// other file fails with a ``PersistenceError`` that names it.
public final class PlistStore: WholeFileStore, @unchecked Sendable {
    /// `"plist"`.
    public override class var storeType: String { "plist" }

    /// The deepest nesting of arrays and dictionaries an XML file may have.
    static let maximumXMLDepth = 128

    /// The file's bytes for `snapshot`: a binary property list in format version 1, or an XML
    /// one when `options.settings["format"] == "xml"` (dates then keep whole seconds only).
    public override class func encode(_ snapshot: StoreSnapshot, options: StoreOptions) throws -> Data {
        let encoder = PropertyListEncoder()
        switch options.settings["format"] {
        case nil, "binary": return try PlistStoreFile(snapshot: snapshot).binaryPropertyList()
        case "xml": encoder.outputFormat = .xml
        case let other?:
            throw PersistenceError(.invalidRequest, "the plist store writes \"binary\" or \"xml\", not \"\(other)\"")
        }
        do {
            return try encoder.encode(PlistStoreFile(snapshot: snapshot))
        } catch let error as PersistenceError {
            throw error
        } catch {
            throw PersistenceError(.invalidRequest, "cannot encode the store as a property list: \(error)", underlying: error)
        }
    }

    /// The snapshot `data` holds; throws ``PersistenceError`` naming `url` (``PersistenceError/Code/corruptStore``
    /// or ``PersistenceError/Code/notAStore``) for anything that is not a plist store of format
    /// version 1, binary or XML.
    public override class func decode(_ data: Data, url: URL, options: StoreOptions) throws -> StoreSnapshot {
        try checkShape(of: data, url: url)
        do {
            return try PropertyListDecoder().decode(PlistStoreFile.self, from: data).snapshot
        } catch var error as PersistenceError {
            error.url = url
            throw error
        } catch let error as DecodingError {
            throw PersistenceError(.corruptStore, PlistStoreFile.describe(error), url: url, underlying: error)
        } catch {
            throw PersistenceError(.corruptStore, "the file cannot be read as a property list: \(error)", url: url, underlying: error)
        }
    }

    /// Refuses, before any parsing, what is not a binary or XML property list, and XML nested
    /// too deep for Foundation's recursive parser.
    private static func checkShape(of data: Data, url: URL) throws {
        if data.starts(with: Array("bplist".utf8)) { return }
        var start = data.startIndex
        if data.starts(with: [0xEF, 0xBB, 0xBF]) { start += 3 }
        while start < data.endIndex, [0x20, 0x09, 0x0A, 0x0D].contains(data[start]) { start += 1 }
        guard start < data.endIndex else {
            throw PersistenceError(.corruptStore, "the file is empty, not a property list", url: url)
        }
        switch data[start] {
        case UInt8(ascii: "<"):
            try checkXMLDepth(data, url: url)
        case UInt8(ascii: "{"), UInt8(ascii: "["):
            if (try? JSONDecoder().decode(AnyJSON.self, from: data)) != nil {
                throw PersistenceError(.notAStore, "the file is JSON, not a property list store", url: url)
            }
            throw PersistenceError(.corruptStore, "the file is neither a binary nor an XML property list", url: url)
        default:
            throw PersistenceError(.corruptStore, "the file is neither a binary nor an XML property list", url: url)
        }
    }

    /// Counts `<array>`/`<dict>` nesting (conservatively: tags inside comments count too).
    private static func checkXMLDepth(_ data: Data, url: URL) throws {
        try data.withUnsafeBytes { (bytes: UnsafeRawBufferPointer) in
            let array = Array("array".utf8), dict = Array("dict".utf8)
            func matches(_ name: [UInt8], at index: Int) -> Bool {
                guard index + name.count < bytes.count else { return false }
                for offset in 0..<name.count where bytes[index + offset] != name[offset] { return false }
                let next = bytes[index + name.count]
                return next == UInt8(ascii: ">") || next == UInt8(ascii: " ") || next == UInt8(ascii: "/")
                    || next == 0x09 || next == 0x0A || next == 0x0D
            }
            var depth = 0
            var index = 0
            while index < bytes.count - 1 {
                if bytes[index] == UInt8(ascii: "<") {
                    if bytes[index + 1] == UInt8(ascii: "/") {
                        if matches(array, at: index + 2) || matches(dict, at: index + 2) { depth -= 1 }
                    } else if matches(array, at: index + 1) || matches(dict, at: index + 1) {
                        let name = bytes[index + 1] == UInt8(ascii: "a") ? array.count : dict.count
                        // `<array/>` opens nothing.
                        var end = index + 1 + name
                        while end < bytes.count, bytes[end] != UInt8(ascii: ">") { end += 1 }
                        if end < bytes.count, bytes[end - 1] != UInt8(ascii: "/") {
                            depth += 1
                            if depth > maximumXMLDepth {
                                throw PersistenceError(
                                    .corruptStore, "the XML property list nests deeper than \(maximumXMLDepth) levels", url: url)
                            }
                        }
                    }
                }
                index += 1
            }
        }
    }
}

/// Any JSON document (used only to tell a JSON file from a damaged property list).
private struct AnyJSON: Decodable {
    init(from decoder: any Decoder) throws {}
}

// MARK: - The file format

/// A coding key made at run time (entity, property and metadata entry names).
private struct PlistStoreKey: CodingKey, Hashable {
    var stringValue: String
    var intValue: Int? { nil }
    init(_ string: String) { stringValue = string }
    init?(stringValue: String) { self.stringValue = stringValue }
    init?(intValue: Int) { nil }
}

/// The whole file: what `PlistStore` encodes and decodes.
private struct PlistStoreFile: Codable {
    static let marker = "concord.store"
    static let version = 1
    static let idKey = PlistStoreKey("@id")

    enum Keys: String, CodingKey { case format, formatVersion, metadata, schema, records }
    enum MetadataKeys: String, CodingKey { case storeIdentifier, schemaVersion, entries }

    var snapshot: StoreSnapshot

    init(snapshot: StoreSnapshot) { self.snapshot = snapshot }

    /// How one property of an entity is written.
    enum PropertyKind {
        case attribute(AttributeType)
        case toOne(destination: String)
        case toMany(destination: String)
    }

    /// An entity's properties, by name and in the order they are written.
    struct Plan {
        var ordered: [(key: PlistStoreKey, kind: PropertyKind)]
        var byName: [String: PropertyKind]

        init(_ entity: EntityDescription) {
            var byName: [String: PropertyKind] = [:]
            for attribute in entity.attributes { byName[attribute.name] = .attribute(attribute.type) }
            for relationship in entity.relationships {
                byName[relationship.name] = relationship.isToMany
                    ? .toMany(destination: relationship.destination) : .toOne(destination: relationship.destination)
            }
            self.byName = byName
            ordered = byName.keys.sorted { $0.utf8.lexicographicallyPrecedes($1.utf8) }.map { (PlistStoreKey($0), byName[$0]!) }
        }
    }

    // MARK: Encoding

    func encode(to encoder: any Encoder) throws {
        var file = encoder.container(keyedBy: Keys.self)
        try file.encode(Self.marker, forKey: .format)
        try file.encode(Self.version, forKey: .formatVersion)

        var metadata = file.nestedContainer(keyedBy: MetadataKeys.self, forKey: .metadata)
        try metadata.encode(snapshot.metadata.storeIdentifier.uuidString.lowercased(), forKey: .storeIdentifier)
        try metadata.encode(snapshot.metadata.schemaVersion, forKey: .schemaVersion)
        var entries = metadata.nestedContainer(keyedBy: PlistStoreKey.self, forKey: .entries)
        for key in snapshot.metadata.entries.keys.sorted(by: { $0.utf8.lexicographicallyPrecedes($1.utf8) }) {
            try entries.encode(snapshot.metadata.entries[key]!, forKey: PlistStoreKey(key))
        }

        try file.encode(snapshot.schema, forKey: .schema)

        // Records sorted by entity, then id: each entity's records are one contiguous run.
        let sorted = snapshot.sortedRecords
        var start = 0
        var records = file.nestedContainer(keyedBy: PlistStoreKey.self, forKey: .records)
        let entities = snapshot.schema.entities.sorted { $0.name.utf8.lexicographicallyPrecedes($1.name.utf8) }
        for entity in entities {
            while start < sorted.count, sorted[start].id.entity.utf8.lexicographicallyPrecedes(entity.name.utf8) {
                throw PersistenceError(.invalidRequest, "cannot write \(sorted[start].id): no entity \(sorted[start].id.entity) in the schema")
            }
            var end = start
            while end < sorted.count, sorted[end].id.entity == entity.name { end += 1 }
            let plan = Plan(entity)
            var list = records.nestedUnkeyedContainer(forKey: PlistStoreKey(entity.name))
            for record in sorted[start..<end] {
                var object = list.nestedContainer(keyedBy: PlistStoreKey.self)
                try Self.encode(record, plan: plan, into: &object)
            }
            start = end
        }
        if start < sorted.count {
            throw PersistenceError(.invalidRequest, "cannot write \(sorted[start].id): no entity \(sorted[start].id.entity) in the schema")
        }
    }

    static func encode(_ record: Record, plan: Plan, into object: inout KeyedEncodingContainer<PlistStoreKey>) throws {
        try object.encode(record.id.uuid.uuidString.lowercased(), forKey: idKey)
        for (key, kind) in plan.ordered {
            switch kind {
            case .attribute(let type):
                guard let value = record.values[key.stringValue] else { continue }
                switch (value, type) {
                case (.null, _): continue
                case (.string(let string), .string): try object.encode(string, forKey: key)
                case (.integer(let integer), .integer): try object.encode(integer, forKey: key)
                case (.double(let double), .double): try object.encode(double, forKey: key)
                // An update may put an integer in a double attribute; it is kept as the double it means.
                case (.integer(let integer), .double): try object.encode(Double(integer), forKey: key)
                case (.boolean(let boolean), .boolean): try object.encode(boolean, forKey: key)
                case (.date(let date), .date): try object.encode(date, forKey: key)
                case (.data(let data), .data): try object.encode(data, forKey: key)
                case (.uuid(let uuid), .uuid): try object.encode(uuid.uuidString.lowercased(), forKey: key)
                default:
                    throw PersistenceError(
                        .invalidRequest, "cannot write \(record.id).\(key.stringValue): \(value) is not \(type.rawValue)")
                }
            case .toOne:
                if let target = record.toOne[key.stringValue] {
                    try object.encode(target.uuid.uuidString.lowercased(), forKey: key)
                }
            case .toMany:
                if let targets = record.toMany[key.stringValue], !targets.isEmpty {
                    try object.encode(targets.sorted().map { $0.uuid.uuidString.lowercased() }, forKey: key)
                }
            }
        }
    }

    // MARK: Decoding

    init(from decoder: any Decoder) throws {
        let file: KeyedDecodingContainer<Keys>
        do {
            file = try decoder.container(keyedBy: Keys.self)
        } catch {
            throw PersistenceError(.notAStore, "the file is a property list whose root is not a dictionary, so not a Concord store")
        }
        guard (try? file.decodeIfPresent(String.self, forKey: .format)) == Self.marker else {
            throw PersistenceError(.notAStore, "the file is a property list without the \"format\": \"\(Self.marker)\" marker, so not a Concord store")
        }
        let version = try Self.field("formatVersion") { try file.decode(Int.self, forKey: .formatVersion) }
        guard version == Self.version else {
            throw PersistenceError(.corruptStore, "the file has format version \(version); this plugin reads version \(Self.version)")
        }

        let metadata = try Self.field("metadata") { try file.nestedContainer(keyedBy: MetadataKeys.self, forKey: .metadata) }
        let identifierText = try Self.field("metadata.storeIdentifier") { try metadata.decode(String.self, forKey: .storeIdentifier) }
        guard let identifier = UUID(uuidString: identifierText) else {
            throw PersistenceError(.corruptStore, "metadata.storeIdentifier \"\(identifierText)\" is not a UUID")
        }
        let schemaVersion = try Self.field("metadata.schemaVersion") { try metadata.decode(Int.self, forKey: .schemaVersion) }
        var entries: [String: Data] = [:]
        if metadata.contains(.entries) {
            let container = try Self.field("metadata.entries") { try metadata.nestedContainer(keyedBy: PlistStoreKey.self, forKey: .entries) }
            for key in container.allKeys {
                entries[key.stringValue] = try Self.field("metadata.entries.\(key.stringValue)") { try container.decode(Data.self, forKey: key) }
            }
        }

        let schema: Schema
        do {
            schema = try file.decode(Schema.self, forKey: .schema)
        } catch let error as SchemaError {
            throw PersistenceError(.corruptStore, "the file's schema is invalid: \(error)", underlying: error)
        } catch {
            throw PersistenceError(.corruptStore, "the file's schema cannot be read: \(Self.describe(error))", underlying: error)
        }
        guard schema.version == schemaVersion else {
            throw PersistenceError(
                .corruptStore, "metadata.schemaVersion \(schemaVersion) is not the version of the file's schema (\(schema.version))")
        }

        var records: [ObjectID: Record] = [:]
        let groups = try Self.field("records") { try file.nestedContainer(keyedBy: PlistStoreKey.self, forKey: .records) }
        for entityKey in groups.allKeys {
            guard let entity = schema.entity(entityKey.stringValue) else {
                throw PersistenceError(.corruptStore, "records of entity \(entityKey.stringValue), which the file's schema lacks")
            }
            let plan = Plan(entity)
            var list = try Self.field("records.\(entity.name)") { try groups.nestedUnkeyedContainer(forKey: entityKey) }
            if let count = list.count { records.reserveCapacity(records.count + count) }
            while !list.isAtEnd {
                let index = list.currentIndex
                let object = try Self.field("records.\(entity.name)[\(index)]") { try list.nestedContainer(keyedBy: PlistStoreKey.self) }
                let record = try Self.decodeRecord(object, entity: entity.name, index: index, plan: plan)
                guard records.updateValue(record, forKey: record.id) == nil else {
                    throw PersistenceError(.corruptStore, "\(record.id) appears twice")
                }
            }
        }
        snapshot = StoreSnapshot(
            metadata: StoreMetadata(storeIdentifier: identifier, schemaVersion: schemaVersion, entries: entries),
            schema: schema, records: records)
    }

    static func decodeRecord(
        _ object: KeyedDecodingContainer<PlistStoreKey>, entity: String, index: Int, plan: Plan
    ) throws -> Record {
        let idText = try field("records.\(entity)[\(index)].@id") { try object.decode(String.self, forKey: idKey) }
        guard let uuid = UUID(uuidString: idText) else {
            throw PersistenceError(.corruptStore, "record \(index) of \(entity) has the id \"\(idText)\", which is not a UUID")
        }
        var record = Record(id: ObjectID(entity: entity, uuid: uuid))
        for key in object.allKeys where key != idKey {
            let name = key.stringValue
            guard let kind = plan.byName[name] else {
                throw PersistenceError(.corruptStore, "\(record.id) has a property \(name) that \(entity) lacks")
            }
            do {
                if try object.decodeNil(forKey: key) { continue }
                switch kind {
                case .attribute(let type):
                    let value: Value
                    switch type {
                    case .string: value = .string(try object.decode(String.self, forKey: key))
                    case .integer: value = .integer(try object.decode(Int64.self, forKey: key))
                    case .double: value = .double(try object.decode(Double.self, forKey: key))
                    case .boolean: value = .boolean(try object.decode(Bool.self, forKey: key))
                    case .date: value = .date(try object.decode(Date.self, forKey: key))
                    case .data: value = .data(try object.decode(Data.self, forKey: key))
                    case .uuid:
                        let text = try object.decode(String.self, forKey: key)
                        guard let uuid = UUID(uuidString: text) else {
                            throw PersistenceError(.corruptStore, "\(record.id).\(name): \"\(text)\" is not a UUID")
                        }
                        value = .uuid(uuid)
                    }
                    record.values[name] = value
                case .toOne(let destination):
                    let text = try object.decode(String.self, forKey: key)
                    guard let uuid = UUID(uuidString: text) else {
                        throw PersistenceError(.corruptStore, "\(record.id).\(name): the target \"\(text)\" is not a UUID")
                    }
                    record.toOne[name] = ObjectID(entity: destination, uuid: uuid)
                case .toMany(let destination):
                    let texts = try object.decode([String].self, forKey: key)
                    var targets = Set<ObjectID>()
                    targets.reserveCapacity(texts.count)
                    for text in texts {
                        guard let uuid = UUID(uuidString: text) else {
                            throw PersistenceError(.corruptStore, "\(record.id).\(name): the target \"\(text)\" is not a UUID")
                        }
                        targets.insert(ObjectID(entity: destination, uuid: uuid))
                    }
                    if !targets.isEmpty { record.toMany[name] = targets }
                }
            } catch let error as PersistenceError {
                throw error
            } catch {
                throw PersistenceError(.corruptStore, "\(record.id).\(name): \(describeValueError(error, kind: kind))", underlying: error)
            }
        }
        return record
    }

    /// Runs `body`, turning a decoding error into a `corruptStore` that names `path`.
    static func field<T>(_ path: String, _ body: () throws -> T) throws -> T {
        do {
            return try body()
        } catch let error as PersistenceError {
            throw error
        } catch {
            throw PersistenceError(.corruptStore, "\(path): \(describe(error))", underlying: error)
        }
    }

    static func describeValueError(_ error: any Error, kind: PropertyKind) -> String {
        let expected: String
        switch kind {
        case .attribute(let type): expected = type.rawValue
        case .toOne: expected = "an id"
        case .toMany: expected = "an array of ids"
        }
        return "the value is not \(expected) (\(describe(error)))"
    }

    /// A decoding error in words, without Foundation's boilerplate.
    static func describe(_ error: any Error) -> String {
        guard let error = error as? DecodingError else { return "\(error)" }
        func path(_ context: DecodingError.Context) -> String {
            context.codingPath.isEmpty ? "" : " at " + context.codingPath.map { $0.intValue.map { "[\($0)]" } ?? $0.stringValue }.joined(separator: ".")
        }
        switch error {
        case .dataCorrupted(let context):
            if context.codingPath.isEmpty {
                return "the file is not a valid property list (damaged, truncated or empty)"
            }
            return "\(context.debugDescription)\(path(context))"
        case .keyNotFound(let key, let context): return "\(key.stringValue) is missing\(path(context))"
        case .typeMismatch(let type, let context): return "expected \(type)\(path(context)): \(context.debugDescription)"
        case .valueNotFound(let type, let context): return "expected \(type), found null\(path(context))"
        @unknown default: return "\(error)"
        }
    }
}

// MARK: - The binary writer

extension PlistStoreFile {
    /// The file as a binary property list (`bplist00`), every dictionary's keys in byte order.
    func binaryPropertyList() throws -> Data {
        var writer = BinaryPlistWriter()
        let metadata = writer.dictionary([
            ("entries", writer.dictionary(
                snapshot.metadata.entries.sorted { $0.key.utf8.lexicographicallyPrecedes($1.key.utf8) }
                    .map { ($0.key, writer.add(.data($0.value))) })),
            ("schemaVersion", writer.add(.integer(Int64(snapshot.metadata.schemaVersion)))),
            ("storeIdentifier", writer.add(.string(snapshot.metadata.storeIdentifier.uuidString.lowercased()))),
        ])
        let schema = writer.schema(snapshot.schema)

        // Records sorted by entity, then id: each entity's records are one contiguous run.
        let sorted = snapshot.sortedRecords
        var start = 0
        var groups: [(String, Int)] = []
        for entity in snapshot.schema.entities.sorted(by: { $0.name.utf8.lexicographicallyPrecedes($1.name.utf8) }) {
            if start < sorted.count, sorted[start].id.entity.utf8.lexicographicallyPrecedes(entity.name.utf8) { break }
            var end = start
            while end < sorted.count, sorted[end].id.entity == entity.name { end += 1 }
            let plan = Plan(entity)
            var list: [Int] = []
            list.reserveCapacity(end - start)
            for record in sorted[start..<end] { list.append(try writer.record(record, plan: plan)) }
            groups.append((entity.name, writer.add(.array(list))))
            start = end
        }
        if start < sorted.count {
            throw PersistenceError(.invalidRequest, "cannot write \(sorted[start].id): no entity \(sorted[start].id.entity) in the schema")
        }
        let root = writer.dictionary([
            ("format", writer.add(.string(Self.marker))),
            ("formatVersion", writer.add(.integer(Int64(Self.version)))),
            ("metadata", metadata),
            ("records", writer.dictionary(groups)),
            ("schema", schema),
        ])
        return writer.serialize(root: root)
    }
}

/// Writes a binary property list object by object; containers refer to objects added before.
private struct BinaryPlistWriter {
    enum Object {
        case boolean(Bool), integer(Int64), real(Double), date(Double), data(Data), string(String)
        case array([Int])
        case dictionary(keys: [Int], values: [Int])
    }

    private var objects: [Object] = []
    private var keys: [String: Int] = [:]

    /// Adds `object`; returns its reference.
    mutating func add(_ object: Object) -> Int {
        objects.append(object)
        return objects.count - 1
    }

    /// A dictionary of `pairs`, written in the byte order of the keys; keys are shared.
    mutating func dictionary(_ pairs: [(String, Int)]) -> Int {
        let sorted = pairs.sorted { $0.0.utf8.lexicographicallyPrecedes($1.0.utf8) }
        var keyReferences: [Int] = []
        keyReferences.reserveCapacity(sorted.count)
        for (key, _) in sorted {
            if let reference = keys[key] {
                keyReferences.append(reference)
            } else {
                let reference = add(.string(key))
                keys[key] = reference
                keyReferences.append(reference)
            }
        }
        return add(.dictionary(keys: keyReferences, values: sorted.map(\.1)))
    }

    /// One record, its properties typed by `plan`.
    mutating func record(_ record: Record, plan: PlistStoreFile.Plan) throws -> Int {
        var pairs: [(String, Int)] = [("@id", add(.string(record.id.uuid.uuidString.lowercased())))]
        for (key, kind) in plan.ordered {
            let name = key.stringValue
            switch kind {
            case .attribute(let type):
                guard let value = record.values[name] else { continue }
                let object: Object
                switch (value, type) {
                case (.null, _): continue
                case (.string(let string), .string): object = .string(string)
                case (.integer(let integer), .integer): object = .integer(integer)
                case (.double(let double), .double): object = .real(double)
                // An update may put an integer in a double attribute; it is kept as the double it means.
                case (.integer(let integer), .double): object = .real(Double(integer))
                case (.boolean(let boolean), .boolean): object = .boolean(boolean)
                case (.date(let date), .date): object = .date(date.timeIntervalSinceReferenceDate)
                case (.data(let data), .data): object = .data(data)
                case (.uuid(let uuid), .uuid): object = .string(uuid.uuidString.lowercased())
                default:
                    throw PersistenceError(.invalidRequest, "cannot write \(record.id).\(name): \(value) is not \(type.rawValue)")
                }
                pairs.append((name, add(object)))
            case .toOne:
                if let target = record.toOne[name] { pairs.append((name, add(.string(target.uuid.uuidString.lowercased())))) }
            case .toMany:
                if let targets = record.toMany[name], !targets.isEmpty {
                    let references = targets.sorted().map { add(.string($0.uuid.uuidString.lowercased())) }
                    pairs.append((name, add(.array(references))))
                }
            }
        }
        return dictionary(pairs)
    }

    /// `schema` in the form `Schema`'s (synthesized) Codable conformance reads.
    mutating func schema(_ schema: Schema) -> Int {
        let entities = schema.entities.map { entity -> Int in
            let attributes = entity.attributes.map { attribute -> Int in
                var pairs = [
                    ("name", add(.string(attribute.name))),
                    ("type", add(.string(attribute.type.rawValue))),
                    ("isOptional", add(.boolean(attribute.isOptional))),
                ]
                if let value = attribute.defaultValue { pairs.append(("defaultValue", self.value(value))) }
                return dictionary(pairs)
            }
            let relationships = entity.relationships.map { relationship in
                dictionary([
                    ("name", add(.string(relationship.name))),
                    ("destination", add(.string(relationship.destination))),
                    ("inverse", add(.string(relationship.inverse))),
                    ("isToMany", add(.boolean(relationship.isToMany))),
                    ("isOptional", add(.boolean(relationship.isOptional))),
                    ("deleteRule", add(.string(relationship.deleteRule.rawValue))),
                ])
            }
            return dictionary([
                ("name", add(.string(entity.name))),
                ("attributes", add(.array(attributes))),
                ("relationships", add(.array(relationships))),
            ])
        }
        return dictionary([("version", add(.integer(Int64(schema.version)))), ("entities", add(.array(entities)))])
    }

    /// A `Value` in the form its synthesized Codable conformance reads: `{case: {_0: payload}}`.
    private mutating func value(_ value: Value) -> Int {
        let payload: Object
        switch value {
        case .null: return dictionary([("null", dictionary([]))])
        case .string(let string): payload = .string(string)
        case .integer(let integer): payload = .integer(integer)
        case .double(let double): payload = .real(double)
        case .boolean(let boolean): payload = .boolean(boolean)
        case .date(let date): payload = .date(date.timeIntervalSinceReferenceDate)
        case .data(let data): payload = .data(data)
        case .uuid(let uuid): payload = .string(uuid.uuidString)
        }
        let name: String
        switch value {
        case .null: name = "null"
        case .string: name = "string"
        case .integer: name = "integer"
        case .double: name = "double"
        case .boolean: name = "boolean"
        case .date: name = "date"
        case .data: name = "data"
        case .uuid: name = "uuid"
        }
        return dictionary([(name, dictionary([("_0", add(payload))]))])
    }

    /// The file: header, objects, offset table, trailer.
    func serialize(root: Int) -> Data {
        // Readers require the reference width to count every object, not just the last index.
        let referenceSize = Self.width(of: UInt64(objects.count))
        var out: [UInt8] = Array("bplist00".utf8)
        var offsets: [Int] = []
        offsets.reserveCapacity(objects.count)
        for object in objects {
            offsets.append(out.count)
            switch object {
            case .boolean(let boolean): out.append(boolean ? 0x09 : 0x08)
            case .integer(let integer): Self.appendInteger(integer, to: &out)
            case .real(let real):
                out.append(0x23)
                Self.append(real.bitPattern, width: 8, to: &out)
            case .date(let seconds):
                out.append(0x33)
                Self.append(seconds.bitPattern, width: 8, to: &out)
            case .data(let data):
                Self.appendMarker(0x40, count: data.count, to: &out)
                out.append(contentsOf: data)
            case .string(let string):
                if string.utf8.allSatisfy({ $0 < 0x80 }) {
                    Self.appendMarker(0x50, count: string.utf8.count, to: &out)
                    out.append(contentsOf: string.utf8)
                } else {
                    Self.appendMarker(0x60, count: string.utf16.count, to: &out)
                    for unit in string.utf16 { Self.append(UInt64(unit), width: 2, to: &out) }
                }
            case .array(let references):
                Self.appendMarker(0xA0, count: references.count, to: &out)
                for reference in references { Self.append(UInt64(reference), width: referenceSize, to: &out) }
            case .dictionary(let keys, let values):
                Self.appendMarker(0xD0, count: keys.count, to: &out)
                for reference in keys { Self.append(UInt64(reference), width: referenceSize, to: &out) }
                for reference in values { Self.append(UInt64(reference), width: referenceSize, to: &out) }
            }
        }
        let tableOffset = out.count
        let offsetSize = Self.width(of: UInt64(tableOffset))
        for offset in offsets { Self.append(UInt64(offset), width: offsetSize, to: &out) }
        out.append(contentsOf: [0, 0, 0, 0, 0, 0, UInt8(offsetSize), UInt8(referenceSize)])
        Self.append(UInt64(objects.count), width: 8, to: &out)
        Self.append(UInt64(root), width: 8, to: &out)
        Self.append(UInt64(tableOffset), width: 8, to: &out)
        return Data(out)
    }

    private static func width(of value: UInt64) -> Int {
        value <= 0xFF ? 1 : value <= 0xFFFF ? 2 : value <= 0xFFFF_FFFF ? 4 : 8
    }

    private static func append(_ value: UInt64, width: Int, to out: inout [UInt8]) {
        for index in stride(from: width - 1, through: 0, by: -1) { out.append(UInt8(truncatingIfNeeded: value >> (index * 8))) }
    }

    /// An integer object: 1, 2 or 4 unsigned bytes when it fits, else 8 signed ones.
    private static func appendInteger(_ value: Int64, to out: inout [UInt8]) {
        let width = value < 0 ? 8 : Self.width(of: UInt64(value))
        out.append(0x10 | UInt8(width.trailingZeroBitCount))
        append(UInt64(bitPattern: value), width: width, to: &out)
    }

    /// A type marker whose low nibble holds `count`, or 0xF and an integer object after it.
    private static func appendMarker(_ marker: UInt8, count: Int, to out: inout [UInt8]) {
        if count < 15 {
            out.append(marker | UInt8(count))
        } else {
            out.append(marker | 0x0F)
            appendInteger(Int64(count), to: &out)
        }
    }
}
