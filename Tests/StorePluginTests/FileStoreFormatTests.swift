import ConcordTestSupport
import Foundation
import JSONStore
import Persistence
import PlistStore
import Testing

/// The JSON and plist plugins' file formats: exact round trips, deterministic bytes, the
/// documented layout, and typed errors for every kind of bad file. (The generic store contract
/// and damaged-file behaviour common to all plugins live in the conformance suites.)
@Suite("JSON and plist formats")
struct FileStoreFormatTests {
    let directory = TemporaryDirectory("file-store-format")

    static let schema = try! Schema(
        version: 1,
        entities: [
            EntityDescription(
                "Sample",
                attributes: [
                    AttributeDescription("text", .string, isOptional: true),
                    AttributeDescription("number", .integer, isOptional: true, defaultValue: .integer(.min)),
                    AttributeDescription("real", .double, isOptional: true, defaultValue: .double(-0.0)),
                    AttributeDescription("flag", .boolean, isOptional: true, defaultValue: .boolean(true)),
                    AttributeDescription(
                        "when",
                        .date,
                        isOptional: true,
                        defaultValue: .date(Date(timeIntervalSinceReferenceDate: 86_400))
                    ),
                    AttributeDescription("blob", .data, isOptional: true, defaultValue: .data(Data([0, 1]))),
                    AttributeDescription(
                        "tag",
                        .uuid,
                        isOptional: true,
                        defaultValue: .uuid(UUID(uuidString: "5B2C7E3A-1F0D-4C8E-9A6B-2D4F6E8A0C1E")!)
                    ),
                    AttributeDescription("nothing", .string, isOptional: true, defaultValue: .null),
                    AttributeDescription("id", .string, isOptional: true, defaultValue: .string("named id")),
                ],
                relationships: [
                    RelationshipDescription("parent", to: "Sample", inverse: "children"),
                    RelationshipDescription("children", to: "Sample", inverse: "parent", isToMany: true),
                ]
            ),
            EntityDescription("Note", attributes: [AttributeDescription("title", .string)]),
        ]
    )

    /// The plugins, with the settings that select their formats.
    enum Flavor: String, CaseIterable, CustomTestStringConvertible {
        case json, binaryPlist, xmlPlist
        var type: any PersistentStore.Type { self == .json ? JSONStore.self : PlistStore.self }
        var format: any StoreFileFormat.Type { self == .json ? JSONFormat.self : PlistFormat.self }
        var options: StoreOptions {
            StoreOptions(presentsFiles: false, settings: self == .xmlPlist ? ["format": "xml"] : [:])
        }
        var fileName: String { self == .json ? "store.json" : "store.plist" }
        var testDescription: String { rawValue }
    }

    static let edgeDoubles: [Double] = [
        -0.0, 0.0, 1.0, -1.0, 0.1, 1.0 / 3.0, 1e308, -1e308, .greatestFiniteMagnitude, .leastNonzeroMagnitude,
        .leastNormalMagnitude, 9_007_199_254_740_994, 123_456_789.123_456_789, .infinity, -.infinity, .nan,
    ]

    static let edgeDates: [Date] = [
        Date(timeIntervalSinceReferenceDate: 0.000_001),
        Date(timeIntervalSinceReferenceDate: 12_345.678_901_234),
        Date(timeIntervalSince1970: 1_700_000_000.123_456_789),
        Date(timeIntervalSince1970: -1_000.5),
        Date(timeIntervalSinceReferenceDate: -0.25),
        Date(timeIntervalSinceReferenceDate: 1e15 + 0.5),
    ]

    static let edgeStrings = [
        "", "plain", "é, 日本語, 🇫🇷👩‍👩‍👧", "quote \" backslash \\ slash / tab \t newline \n", "\u{1}\u{1F}\u{7F}",
        String(repeating: "long ", count: 2_000), "<dict>&amp;</dict>", "\u{FEFF}bom",
    ]

    /// Records holding every edge value, one value per record and attribute.
    static func edgeRecords() -> [Record] {
        var records: [Record] = []
        func add(_ values: [String: Value]) {
            records.append(Record(id: .random(entity: "Sample"), values: values))
        }
        for double in edgeDoubles { add(["real": .double(double)]) }
        for date in edgeDates { add(["when": .date(date)]) }
        for string in edgeStrings { add(["text": .string(string), "id": .string(string)]) }
        // Canonically equivalent strings are still different strings.
        add(["text": .string("\u{E9}"), "id": .string("e\u{301}")])
        add(["text": .string("e\u{301}"), "id": .string("\u{E9}")])
        for integer in [Int64.max, .min, 0, -1, 1 << 53 + 1] { add(["number": .integer(integer)]) }
        for data in [Data(), Data([0]), Data((0...255).map { UInt8($0) }), Data(repeating: 0xFF, count: 70_000)] {
            add(["blob": .data(data)])
        }
        add(["flag": .boolean(true), "tag": .uuid(UUID())])
        add(["flag": .boolean(false), "tag": .uuid(UUID(uuidString: "00000000-0000-0000-0000-000000000000")!)])
        add([:])
        // Relationships: a parent with children, children pointing back.
        let parent = ObjectID.random(entity: "Sample")
        let children = (0..<5).map { _ in ObjectID.random(entity: "Sample") }
        records.append(Record(id: parent, toMany: ["children": Set(children)]))
        for child in children { records.append(Record(id: child, toOne: ["parent": parent])) }
        records.append(Record(id: .random(entity: "Note"), values: ["title": .string("a note")]))
        return records
    }

    /// The edge records a flavor can hold: XML 1.0 cannot carry control characters other than
    /// tab, newline and return, so the XML plist gets the others.
    static func edgeRecords(for flavor: Flavor) -> [Record] {
        edgeRecords().filter { record in
            guard flavor == .xmlPlist, case .string(let text) = record["text"] else { return true }
            return !text.unicodeScalars.contains { $0.value < 0x20 && $0 != "\t" && $0 != "\n" }
        }
    }

    /// Values equal to the bit (so `-0.0` differs from `0.0` and NaN equals NaN).
    static func same(_ lhs: Value, _ rhs: Value) -> Bool {
        if case .double(let left) = lhs, case .double(let right) = rhs {
            return left.isNaN ? right.isNaN : left.bitPattern == right.bitPattern
        }
        if case .date(let left) = lhs, case .date(let right) = rhs {
            return left.timeIntervalSinceReferenceDate.bitPattern == right.timeIntervalSinceReferenceDate.bitPattern
        }
        if case .string(let left) = lhs, case .string(let right) = rhs {
            return left.unicodeScalars.elementsEqual(right.unicodeScalars)
        }
        return lhs == rhs
    }

    static func expectSame(_ stored: [Record], _ read: [Record], ignoringDates: Bool = false) {
        let byID = Dictionary(uniqueKeysWithValues: read.map { ($0.id, $0) })
        #expect(read.count == stored.count)
        for record in stored {
            guard let back = byID[record.id] else {
                Issue.record("\(record.id) was not read back")
                continue
            }
            #expect(Set(back.values.keys) == Set(record.values.keys), "\(record.id)")
            for (key, value) in record.values {
                if ignoringDates, case .date = value { continue }
                #expect(same(value, back[key]), "\(record.id).\(key): wrote \(value), read \(back[key])")
            }
            #expect(back.toOne == record.toOne)
            #expect(back.toMany == record.toMany)
        }
    }

    static func allRecords(_ store: any PersistentStore) throws -> [Record] {
        try store.fetch(FetchRequest(entity: "Sample")) + store.fetch(FetchRequest(entity: "Note"))
    }

    // MARK: Round trips

    @Test("Every edge value reads back exactly after the store is reopened", arguments: [Flavor.json, .binaryPlist])
    func exactRoundTrip(_ flavor: Flavor) throws {
        let url = directory(flavor.fileName)
        let records = Self.edgeRecords()
        let store = try flavor.type.init(url: url, schema: Self.schema, options: flavor.options)
        try store.commit(
            StoreChanges(inserts: records, metadataEntries: ["app.empty": Data(), "app.bytes": Data([1, 2, 3])])
        )
        let identifier = try store.metadata().storeIdentifier
        store.close()

        let reopened = try flavor.type.init(url: url, schema: Self.schema, options: flavor.options)
        defer { reopened.close() }
        Self.expectSame(records, try Self.allRecords(reopened))
        #expect(reopened.schema == Self.schema)
        let stored = try flavor.format.decode(try Data(contentsOf: url), url: url, options: flavor.options)
        #expect(stored.schema == Self.schema)
        let metadata = try reopened.metadata()
        #expect(metadata.storeIdentifier == identifier)
        #expect(metadata.schemaVersion == 1)
        #expect(metadata.entries == ["app.empty": Data(), "app.bytes": Data([1, 2, 3])])
    }

    @Test("XML plists keep every value except the sub-second part of dates (and dates far past year 9999)")
    func xmlPlistDates() throws {
        let url = directory("store.xml.plist")
        let records = Self.edgeRecords(for: .xmlPlist)
        let store = try PlistStore(url: url, schema: Self.schema, options: Flavor.xmlPlist.options)
        try store.commit(StoreChanges(inserts: records))
        store.close()
        let text = try String(contentsOf: url, encoding: .utf8)
        #expect(text.hasPrefix("<?xml"))

        let reopened = try PlistStore(url: url, schema: Self.schema, options: Flavor.xmlPlist.options)
        defer { reopened.close() }
        let read = try Self.allRecords(reopened)
        Self.expectSame(records, read, ignoringDates: true)
        let byID = Dictionary(uniqueKeysWithValues: read.map { ($0.id, $0) })
        for record in records {
            guard case .date(let written) = record["when"], case .date(let back)? = byID[record.id]?["when"] else {
                continue
            }
            let seconds = written.timeIntervalSinceReferenceDate
            if abs(seconds) < 1e10 {
                #expect(back.timeIntervalSinceReferenceDate == seconds.rounded(.down), "\(written)")
            } else {
                // Far outside years 1-9999 the XML date text cannot say it (documented).
                #expect(back.timeIntervalSinceReferenceDate != seconds, "\(written)")
            }
        }
    }

    // MARK: Determinism

    @Test("The same contents give the same bytes, whatever order they were built in", arguments: Flavor.allCases)
    func deterministicBytes(_ flavor: Flavor) throws {
        let records = Self.edgeRecords(for: flavor)
        let metadata = StoreMetadata(schemaVersion: 1, entries: ["b": Data([2]), "a": Data([1]), "c": Data()])
        var forward: [ObjectID: Record] = [:]
        for record in records { forward[record.id] = record }
        var backward: [ObjectID: Record] = Dictionary(minimumCapacity: 4_096)
        for record in records.reversed() { backward[record.id] = record }
        var reshuffled = metadata
        reshuffled.entries = [:]
        for key in ["c", "a", "b"] { reshuffled.entries[key] = metadata.entries[key] }

        let first = try flavor.format.encode(
            StoreSnapshot(metadata: metadata, schema: Self.schema, records: forward),
            options: flavor.options
        )
        let second = try flavor.format.encode(
            StoreSnapshot(metadata: reshuffled, schema: Self.schema, records: backward),
            options: flavor.options
        )
        #expect(first == second)
        // Decoding and encoding again changes nothing either.
        let decoded = try flavor.format.decode(first, url: directory("x"), options: flavor.options)
        #expect(try flavor.format.encode(decoded, options: flavor.options) == first)
    }

    @Test(
        "Binary plists of every size around the reference-width boundaries read back",
        arguments: [1, 30, 31, 32, 33, 8_190, 8_191, 8_192]
    )
    func binaryPlistSizes(_ count: Int) throws {
        let records = (0..<count).map { index in
            Record(id: .random(entity: "Note"), values: ["title": .string("n\(index)")])
        }
        let snapshot = StoreSnapshot(
            metadata: StoreMetadata(schemaVersion: 1),
            schema: Self.schema,
            records: Dictionary(uniqueKeysWithValues: records.map { ($0.id, $0) })
        )
        // Sizes near 256 and 65,536 objects (each record adds a few) cross the widths.
        let data = try PlistStore.encode(snapshot, options: StoreOptions())
        let back = try PlistStore.decode(data, url: directory("sizes"), options: StoreOptions())
        #expect(back.records == snapshot.records)
    }

    @Test("JSON records are grouped by entity and sorted by id, with values typed by the schema")
    func jsonLayout() throws {
        let ids = (0..<50).map { _ in ObjectID.random(entity: "Note") }
        let snapshot = StoreSnapshot(
            metadata: StoreMetadata(schemaVersion: 1),
            schema: Self.schema,
            records: Dictionary(uniqueKeysWithValues: ids.map { ($0, Record(id: $0, values: ["title": .string("t")])) })
        )
        let data = try JSONStore.encode(snapshot, options: StoreOptions())
        let object = try #require(try JSONSerialization.jsonObject(with: data) as? [String: Any])
        #expect(object["format"] as? String == "concord.store")
        #expect((object["formatVersion"] as? NSNumber)?.intValue == 1)
        let records = try #require(object["records"] as? [String: [[String: Any]]])
        #expect(records["Sample"]?.isEmpty == true)
        let written = try #require(records["Note"]).map { $0["@id"] as? String }
        #expect(written == ids.sorted().map { $0.uuid.uuidString.lowercased() })
        let text = String(decoding: data, as: UTF8.self)
        #expect(text.contains(#""title":"t""#))
    }

    @Test("A hand-written JSON file in the documented format opens")
    func handWrittenJSON() throws {
        let url = directory("hand.json")
        let json = #"""
            {
              "format": "concord.store",
              "formatVersion": 1,
              "metadata": {
                "storeIdentifier": "5b2c7e3a-1f0d-4c8e-9a6b-2d4f6e8a0c1e",
                "schemaVersion": 1,
                "entries": { "app.cursor": "AQID" }
              },
              "schema": {
                "version": 1,
                "entities": [
                  { "name": "Task",
                    "attributes": [
                      { "name": "title", "type": "string", "isOptional": false },
                      { "name": "priority", "type": "integer", "isOptional": true },
                      { "name": "weight", "type": "double", "isOptional": true },
                      { "name": "due", "type": "date", "isOptional": true },
                      { "name": "done", "type": "boolean", "isOptional": true },
                      { "name": "attachment", "type": "data", "isOptional": true },
                      { "name": "ref", "type": "uuid", "isOptional": true }
                    ],
                    "relationships": [
                      { "name": "list", "destination": "List", "inverse": "tasks", "isToMany": false, "isOptional": true, "deleteRule": "nullify" }
                    ] },
                  { "name": "List",
                    "attributes": [ { "name": "name", "type": "string", "isOptional": false } ],
                    "relationships": [
                      { "name": "tasks", "destination": "Task", "inverse": "list", "isToMany": true, "isOptional": true, "deleteRule": "cascade" }
                    ] }
                ]
              },
              "records": {
                "List": [
                  { "@id": "00000000-0000-4000-8000-000000000001", "name": "Home",
                    "tasks": ["00000000-0000-4000-8000-00000000000a", "00000000-0000-4000-8000-00000000000b"] }
                ],
                "Task": [
                  { "@id": "00000000-0000-4000-8000-00000000000a", "title": "Buy milk", "priority": 2, "weight": 1,
                    "due": 700000000.5, "done": false, "attachment": "aGk=", "ref": "5B2C7E3A-1F0D-4C8E-9A6B-2D4F6E8A0C1E",
                    "list": "00000000-0000-4000-8000-000000000001" },
                  { "@id": "00000000-0000-4000-8000-00000000000b", "title": "Call", "weight": "NaN", "done": null,
                    "list": "00000000-0000-4000-8000-000000000001" }
                ]
              }
            }
            """#
        try Data(json.utf8).write(to: url)
        let schema = try JSONStore.decode(Data(json.utf8), url: url, options: StoreOptions()).schema
        let store = try JSONStore(url: url, schema: schema, options: StoreOptions(presentsFiles: false))
        defer { store.close() }
        let list = ObjectID(entity: "List", uuid: UUID(uuidString: "00000000-0000-4000-8000-000000000001")!)
        let milk = ObjectID(entity: "Task", uuid: UUID(uuidString: "00000000-0000-4000-8000-00000000000a")!)
        let call = ObjectID(entity: "Task", uuid: UUID(uuidString: "00000000-0000-4000-8000-00000000000b")!)
        let tasks = try store.fetch(FetchRequest(entity: "Task"))
        #expect(tasks.count == 2)
        let first = try #require(tasks.first { $0.id == milk })
        #expect(first["title"] == .string("Buy milk"))
        #expect(first["priority"] == .integer(2))
        #expect(first["weight"] == .double(1))
        #expect(first["due"] == .date(Date(timeIntervalSinceReferenceDate: 700_000_000.5)))
        #expect(first["done"] == .boolean(false))
        #expect(first["attachment"] == .data(Data("hi".utf8)))
        #expect(first["ref"] == .uuid(UUID(uuidString: "5b2c7e3a-1f0d-4c8e-9a6b-2d4f6e8a0c1e")!))
        #expect(first.toOne["list"] == list)
        let second = try #require(tasks.first { $0.id == call })
        guard case .double(let weight) = second["weight"] else {
            Issue.record("weight is \(second["weight"])")
            return
        }
        #expect(weight.isNaN)
        #expect(second["done"] == .null)
        #expect(try store.records(with: [list]).first?.toMany["tasks"] == [milk, call])
        let metadata = try store.metadata()
        #expect(metadata.storeIdentifier == UUID(uuidString: "5b2c7e3a-1f0d-4c8e-9a6b-2d4f6e8a0c1e"))
        #expect(metadata.entries["app.cursor"] == Data([1, 2, 3]))
    }

    // MARK: Bad files

    /// The error opening `data` as a store of `flavor` throws, checked for its code and url.
    func openError(_ data: Data, as flavor: Flavor, _ name: String) -> PersistenceError? {
        let url = directory("bad-\(flavor.rawValue)-\(name)")
        try? data.write(to: url)
        do {
            let store = try flavor.type.init(url: url, schema: Self.schema, options: flavor.options)
            store.close()
            Issue.record("\(name) opened as \(flavor)")
            return nil
        } catch let error as PersistenceError {
            #expect(error.url?.standardizedFileURL == url.standardizedFileURL, "\(name): \(error)")
            #expect((try? Data(contentsOf: url)) == data, "\(name): a file that fails to open is never written")
            return error
        } catch {
            Issue.record("\(name) as \(flavor): not a PersistenceError: \(error)")
            return nil
        }
    }

    func expect(
        _ code: PersistenceError.Code,
        _ data: Data,
        as flavor: Flavor,
        _ name: String,
        mentioning words: [String] = []
    ) {
        guard let error = openError(data, as: flavor, name) else { return }
        #expect(error.code == code, "\(name) as \(flavor): \(error)")
        for word in words { #expect(error.message.contains(word), "\(name): \(error.message) should mention \(word)") }
    }

    /// A valid file of `flavor` holding one Sample record with id `id`, as a mutable tree.
    func validTree(_ flavor: Flavor, id: ObjectID) throws -> [String: Any] {
        let record = Record(id: id, values: ["text": .string("x"), "number": .integer(1)])
        let snapshot = StoreSnapshot(
            metadata: StoreMetadata(schemaVersion: 1),
            schema: Self.schema,
            records: [id: record]
        )
        let data = try flavor.format.encode(snapshot, options: flavor.options)
        if flavor == .json { return try #require(try JSONSerialization.jsonObject(with: data) as? [String: Any]) }
        return try #require(try PropertyListSerialization.propertyList(from: data, format: nil) as? [String: Any])
    }

    func serialize(_ tree: Any, _ flavor: Flavor) throws -> Data {
        if flavor == .json { return try JSONSerialization.data(withJSONObject: tree) }
        return try PropertyListSerialization.data(
            fromPropertyList: tree,
            format: flavor == .xmlPlist ? .xml : .binary,
            options: 0
        )
    }

    /// `tree` with the first Sample record changed by `change`.
    func withRecord(_ tree: [String: Any], _ change: (inout [String: Any]) -> Void) -> [String: Any] {
        var tree = tree
        var records = tree["records"] as! [String: Any]
        var samples = records["Sample"] as! [[String: Any]]
        change(&samples[0])
        records["Sample"] = samples
        tree["records"] = records
        return tree
    }

    @Test("Damaged and foreign files fail to open with the right code, naming the file", arguments: Flavor.allCases)
    func malformedFiles(_ flavor: Flavor) throws {
        let id = ObjectID.random(entity: "Sample")
        let idText = id.uuid.uuidString.lowercased()
        let tree = try validTree(flavor, id: id)
        let valid = try serialize(tree, flavor)

        // Not a file of this format at all.
        expect(.corruptStore, Data(), as: flavor, "empty")
        expect(.corruptStore, Data("\u{0}\u{1}garbage\u{FF}".utf8), as: flavor, "garbage")
        expect(.corruptStore, Data(repeating: 0, count: 4_096), as: flavor, "zeros")
        expect(.corruptStore, valid.prefix(valid.count / 2), as: flavor, "truncated")
        expect(.corruptStore, valid.prefix(valid.count - 12), as: flavor, "end missing")

        // Valid files of the format that are not Concord stores.
        expect(.notAStore, try serialize(["name": "another app's settings"], flavor), as: flavor, "no marker")
        expect(
            .notAStore,
            try serialize(["format": "something.else", "formatVersion": 1], flavor),
            as: flavor,
            "other marker"
        )
        expect(.notAStore, try serialize([1, 2, 3], flavor), as: flavor, "array at the top")

        // The other plugin's files.
        let snapshot = StoreSnapshot(metadata: StoreMetadata(schemaVersion: 1), schema: Self.schema)
        if flavor == .json {
            expect(
                .notAStore,
                try PlistStore.encode(snapshot, options: StoreOptions()),
                as: flavor,
                "binary plist store"
            )
            expect(
                .notAStore,
                try PlistStore.encode(snapshot, options: StoreOptions(settings: ["format": "xml"])),
                as: flavor,
                "xml plist store"
            )
        } else {
            expect(.notAStore, try JSONStore.encode(snapshot, options: StoreOptions()), as: flavor, "json store")
        }

        // Stores whose contents break their own schema.
        var newer = tree
        newer["formatVersion"] = 2
        expect(
            .corruptStore,
            try serialize(newer, flavor),
            as: flavor,
            "format version 2",
            mentioning: ["format version 2"]
        )
        expect(
            .corruptStore,
            try serialize(withRecord(tree) { $0["number"] = "seven" }, flavor),
            as: flavor,
            "string for integer",
            mentioning: ["Sample", idText, "number", "integer"]
        )
        expect(
            .corruptStore,
            try serialize(withRecord(tree) { $0["text"] = 12 }, flavor),
            as: flavor,
            "number for string",
            mentioning: ["Sample", idText, "text"]
        )
        expect(
            .corruptStore,
            try serialize(withRecord(tree) { $0["tag"] = "not-a-uuid" }, flavor),
            as: flavor,
            "bad uuid value",
            mentioning: [idText, "tag"]
        )
        expect(
            .corruptStore,
            try serialize(withRecord(tree) { $0["children"] = ["nope"] }, flavor),
            as: flavor,
            "bad target",
            mentioning: [idText, "children"]
        )
        expect(
            .corruptStore,
            try serialize(withRecord(tree) { $0["@id"] = "12345" }, flavor),
            as: flavor,
            "bad id",
            mentioning: ["Sample", "12345"]
        )
        expect(
            .corruptStore,
            try serialize(withRecord(tree) { $0["@id"] = nil }, flavor),
            as: flavor,
            "missing id",
            mentioning: ["Sample"]
        )
        expect(
            .corruptStore,
            try serialize(withRecord(tree) { $0["color"] = "red" }, flavor),
            as: flavor,
            "unknown property",
            mentioning: [idText, "color"]
        )
        var unknownEntity = tree
        var records = tree["records"] as! [String: Any]
        records["Ghost"] = [["@id": UUID().uuidString]]
        unknownEntity["records"] = records
        expect(.corruptStore, try serialize(unknownEntity, flavor), as: flavor, "unknown entity", mentioning: ["Ghost"])
        var duplicate = tree
        records = tree["records"] as! [String: Any]
        let samples = records["Sample"] as! [[String: Any]]
        records["Sample"] = samples + samples
        duplicate["records"] = records
        expect(
            .corruptStore,
            try serialize(duplicate, flavor),
            as: flavor,
            "duplicate id",
            mentioning: [idText, "twice"]
        )
        var badSchema = tree
        var schema = tree["schema"] as! [String: Any]
        var entities = schema["entities"] as! [[String: Any]]
        entities.append(entities[0])
        schema["entities"] = entities
        badSchema["schema"] = schema
        expect(.corruptStore, try serialize(badSchema, flavor), as: flavor, "invalid schema", mentioning: ["schema"])
        var badIdentifier = tree
        var metadata = tree["metadata"] as! [String: Any]
        metadata["storeIdentifier"] = "store-1"
        badIdentifier["metadata"] = metadata
        expect(
            .corruptStore,
            try serialize(badIdentifier, flavor),
            as: flavor,
            "bad store identifier",
            mentioning: ["storeIdentifier"]
        )
    }

    @Test("Hostile JSON (deep nesting, huge numbers) is refused without a crash")
    func hostileJSON() throws {
        let deep = String(repeating: "[", count: 200_000) + String(repeating: "]", count: 200_000)
        expect(.corruptStore, Data(deep.utf8), as: .json, "deep arrays")
        let deepObject = String(repeating: #"{"a":"#, count: 100_000) + "1" + String(repeating: "}", count: 100_000)
        expect(.corruptStore, Data(deepObject.utf8), as: .json, "deep objects")

        let id = ObjectID.random(entity: "Sample")
        let valid = String(decoding: try serialize(try validTree(.json, id: id), .json), as: UTF8.self)
        #expect(valid.contains(#""number":1"#))
        let huge = valid.replacingOccurrences(of: #""number":1"#, with: #""number":99999999999999999999999"#)
        expect(.corruptStore, Data(huge.utf8), as: .json, "integer beyond Int64")
        let fraction = valid.replacingOccurrences(of: #""number":1"#, with: #""number":1.5"#)
        expect(.corruptStore, Data(fraction.utf8), as: .json, "fraction for integer", mentioning: ["number"])
        let overflow = valid.replacingOccurrences(of: #""number":1"#, with: #""real":1e999"#)
        expect(.corruptStore, Data(overflow.utf8), as: .json, "double beyond range")
        let longNumber = valid.replacingOccurrences(
            of: #""number":1"#,
            with: #""real":"# + String(repeating: "9", count: 100_000)
        )
        expect(.corruptStore, Data(longNumber.utf8), as: .json, "100,000-digit number")
    }

    @Test("Hostile property lists (deep XML nesting, a binary list that contains itself) are refused without a crash")
    func hostilePlists() throws {
        let deep =
            #"<?xml version="1.0" encoding="UTF-8"?><plist version="1.0">"#
            + String(repeating: "<array>", count: 100_000) + String(repeating: "</array>", count: 100_000) + "</plist>"
        expect(.corruptStore, Data(deep.utf8), as: .xmlPlist, "deep XML", mentioning: ["deeper"])
        let deepDicts =
            #"<?xml version="1.0"?><plist version="1.0">"#
            + String(repeating: "<dict><key>k</key>", count: 50_000) + String(repeating: "</dict>", count: 50_000)
            + "</plist>"
        expect(.corruptStore, Data(deepDicts.utf8), as: .xmlPlist, "deep XML dicts")
        expect(.corruptStore, Data(#"{ format = "concord.store"; }"#.utf8), as: .binaryPlist, "OpenStep plist")
        expect(.corruptStore, Data(String(repeating: "(", count: 100_000).utf8), as: .binaryPlist, "deep OpenStep")

        // bplist00 whose root (object 0) is an array holding object 0.
        var cycle = Array("bplist00".utf8) + [0xA1, 0x00]
        let table = cycle.count
        cycle += [8]
        cycle +=
            [0, 0, 0, 0, 0, 0, 1, 1] + [0, 0, 0, 0, 0, 0, 0, 1] + [0, 0, 0, 0, 0, 0, 0, 0] + [
                0, 0, 0, 0, 0, 0, 0, UInt8(table),
            ]
        expect(.notAStore, Data(cycle), as: .binaryPlist, "self-containing array")

        // bplist00 whose root dictionary maps "format" to the dictionary itself.
        var loop = Array("bplist00".utf8)
        let root = loop.count
        loop += [0xD1, 0x01, 0x00]  // dict of 1: key = object 1, value = object 0
        let key = loop.count
        loop += [0x56] + Array("format".utf8)
        let offsets = loop.count
        loop += [UInt8(root), UInt8(key)]
        loop +=
            [0, 0, 0, 0, 0, 0, 1, 1] + [0, 0, 0, 0, 0, 0, 0, 2] + [0, 0, 0, 0, 0, 0, 0, 0] + [
                0, 0, 0, 0, 0, 0, 0, UInt8(offsets),
            ]
        expect(.notAStore, Data(loop), as: .binaryPlist, "self-containing dictionary")
    }
}
