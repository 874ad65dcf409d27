// PlistStore: a Concord store kept as one property list file (binary by default), read whole
// and replaced whole.
//
// This file is also a template: it uses only the public API of Persistence, so you can copy it
// to write a store plugin of your own as a `StoreFileFormat` for `WholeFileStore`.
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
// The layout, the order of everything in it and the checks made when reading are
// `StoreArchive`'s (in Persistence, shared with the JSON plugin, and used by the binary writer
// here for the grouping of records and the typing of their values); this file chooses binary or
// XML and the wording of the errors that name property lists.
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
/// It promises everything `WholeFileStore` promises (atomic, durable commits that re-read
/// other writers' changes first; presenting its file; following moves; tearing down on
/// deletion), and a file format that is deterministic (the same contents give the same bytes).
/// Files are binary property lists unless `options.settings["format"]` is `"xml"`; binary
/// files round-trip every value exactly, while **XML property lists keep dates only to whole
/// seconds on Linux** (sub-second parts are dropped). Its files open only as plist stores: any
/// other file fails with a `PersistenceError` that names it.
public typealias PlistStore = WholeFileStore<PlistFormat>

/// The plist store's file format (see the header of this file): a binary property list, or an
/// XML one when `options.settings["format"] == "xml"`, format version 1.
public enum PlistFormat: StoreFileFormat {
    /// `"plist"`.
    public static var storeType: String { "plist" }

    /// The deepest nesting of arrays and dictionaries an XML file may have.
    static let maximumXMLDepth = 128

    /// The file's bytes for `snapshot`: a binary property list in format version 1, or an XML
    /// one when `options.settings["format"] == "xml"` (dates then keep whole seconds only).
    public static func encode(_ snapshot: StoreSnapshot, options: StoreOptions) throws -> Data {
        let encoder = PropertyListEncoder()
        switch options.settings["format"] {
        case nil, "binary": return try StoreArchive(snapshot: snapshot).binaryPropertyList()
        case "xml": encoder.outputFormat = .xml
        case let other?:
            throw PersistenceError(.invalidRequest, "the plist store writes \"binary\" or \"xml\", not \"\(other)\"")
        }
        do {
            return try encoder.encode(StoreArchive(snapshot: snapshot))
        } catch let error as PersistenceError {
            throw error
        } catch {
            throw PersistenceError(
                .invalidRequest,
                "cannot encode the store as a property list: \(error)",
                underlying: error
            )
        }
    }

    /// The snapshot `data` holds; throws `PersistenceError` naming `url` (`PersistenceError.Code.corruptStore`
    /// or `PersistenceError.Code.notAStore`) for anything that is not a plist store of format
    /// version 1, binary or XML.
    public static func decode(_ data: Data, url: URL, options: StoreOptions) throws -> StoreSnapshot {
        try checkShape(of: data, url: url)
        do {
            let decoder = PropertyListDecoder()
            decoder.userInfo[StoreArchive.wordingKey] = plistWording
            return try decoder.decode(StoreArchive.self, from: data).snapshot
        } catch var error as PersistenceError {
            error.url = url
            throw error
        } catch let error as DecodingError {
            throw PersistenceError(.corruptStore, plistWording.describe(error), url: url, underlying: error)
        } catch {
            throw PersistenceError(
                .corruptStore,
                "the file cannot be read as a property list: \(error)",
                url: url,
                underlying: error
            )
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
            let array = Array("array".utf8)
            let dict = Array("dict".utf8)
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
                                    .corruptStore,
                                    "the XML property list nests deeper than \(maximumXMLDepth) levels",
                                    url: url
                                )
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

/// The messages of ``StoreArchive`` that name property lists.
private let plistWording = StoreArchive.Wording(
    rootNotKeyed: "the file is a property list whose root is not a dictionary, so not a Concord store",
    withoutMarker:
        "the file is a property list without the \"format\": \"\(StoreArchive.formatMarker)\" marker, so not a Concord store",
    unparsable: "the file is not a valid property list (damaged, truncated or empty)"
)

// MARK: - The binary writer

extension StoreArchive {
    /// The file as a binary property list (`bplist00`), every dictionary's keys in byte order.
    fileprivate func binaryPropertyList() throws -> Data {
        var writer = BinaryPlistWriter()
        let metadata = writer.dictionary([
            (
                "entries",
                writer.dictionary(
                    snapshot.metadata.entries.sorted { $0.key.utf8.lexicographicallyPrecedes($1.key.utf8) }
                        .map { ($0.key, writer.add(.data($0.value))) }
                )
            ),
            ("schemaVersion", writer.add(.integer(Int64(snapshot.metadata.schemaVersion)))),
            ("storeIdentifier", writer.add(.string(snapshot.metadata.storeIdentifier.uuidString.lowercased()))),
        ])
        let schema = writer.schema(snapshot.schema)

        var groups: [(String, Int)] = []
        for (entity, records) in try recordGroups() {
            let plan = Plan(entity)
            var list: [Int] = []
            list.reserveCapacity(records.count)
            for record in records { list.append(try writer.record(record, plan: plan)) }
            groups.append((entity.name, writer.add(.array(list))))
        }
        let root = writer.dictionary([
            ("format", writer.add(.string(Self.formatMarker))),
            ("formatVersion", writer.add(.integer(Int64(Self.formatVersion)))),
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
        case boolean(Bool)
        case integer(Int64)
        case real(Double)
        case date(Double)
        case data(Data)
        case string(String)
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
    mutating func record(_ record: Record, plan: StoreArchive.Plan) throws -> Int {
        var pairs: [(String, Int)] = [(StoreArchive.idKey, add(.string(record.id.uuid.uuidString.lowercased())))]
        try plan.forEachValue(of: record) { name, value in
            let object: Object
            switch value {
            case .string(let string): object = .string(string)
            case .integer(let integer): object = .integer(integer)
            case .double(let double): object = .real(double)
            case .boolean(let boolean): object = .boolean(boolean)
            case .date(let date): object = .date(date.timeIntervalSinceReferenceDate)
            case .data(let data): object = .data(data)
            case .strings(let strings): object = .array(strings.map { add(.string($0)) })
            }
            pairs.append((name, add(object)))
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
                // Absent means false (as the decoder reads it), so files without indexes keep their bytes.
                if attribute.isIndexed { pairs.append(("isIndexed", add(.boolean(true)))) }
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
        for index in stride(from: width - 1, through: 0, by: -1) {
            out.append(UInt8(truncatingIfNeeded: value >> (index * 8)))
        }
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
