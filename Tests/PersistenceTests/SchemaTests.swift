import Foundation
import Persistence
import Testing

@Suite("Schema, object ids and records")
struct SchemaTests {
    static func notesSchema() throws -> Schema {
        try Schema(
            version: 1,
            entities: [
                EntityDescription(
                    "Folder",
                    attributes: [AttributeDescription("name", .string)],
                    relationships: [
                        RelationshipDescription(
                            "notes",
                            to: "Note",
                            inverse: "folder",
                            isToMany: true,
                            deleteRule: .cascade
                        )
                    ]
                ),
                EntityDescription(
                    "Note",
                    attributes: [
                        AttributeDescription("title", .string),
                        AttributeDescription("pinned", .boolean, defaultValue: .boolean(false)),
                        AttributeDescription("edited", .date, isOptional: true),
                    ],
                    relationships: [
                        RelationshipDescription("folder", to: "Folder", inverse: "notes", isOptional: false)
                    ]
                ),
            ]
        )
    }

    @Test("A consistent schema is accepted")
    func validSchema() throws {
        let schema = try Self.notesSchema()
        #expect(schema.entity("Note")?.relationship("folder")?.destination == "Folder")
    }

    @Test("Inconsistent schemas are refused with an error that names the entity and property")
    func invalidSchemas() {
        let cases: [([EntityDescription], String, String?)] = [
            ([EntityDescription("A"), EntityDescription("A")], "A", nil),
            (
                [
                    EntityDescription(
                        "A",
                        attributes: [AttributeDescription("x", .string), AttributeDescription("x", .integer)]
                    )
                ], "A", "x"
            ),
            ([EntityDescription("A", relationships: [RelationshipDescription("b", to: "B", inverse: "a")])], "A", "b"),
            (
                [
                    EntityDescription("A", relationships: [RelationshipDescription("b", to: "B", inverse: "a")]),
                    EntityDescription("B"),
                ], "A", "b"
            ),
            (
                [
                    EntityDescription("A", relationships: [RelationshipDescription("b", to: "B", inverse: "a")]),
                    EntityDescription("B", relationships: [RelationshipDescription("a", to: "A", inverse: "other")]),
                ], "A", "b"
            ),
            (
                [EntityDescription("A", attributes: [AttributeDescription("n", .integer, defaultValue: .string("1"))])],
                "A", "n"
            ),
        ]
        for (entities, entity, property) in cases {
            #expect {
                _ = try Schema(version: 1, entities: entities)
            } throws: { error in
                guard let error = error as? SchemaError else { return false }
                return error.entity == entity && error.property == property
            }
        }
    }

    @Test("Name-based ids follow RFC 9562 version 5 and agree across devices")
    func deterministicIDs() {
        // RFC 9562's example: the DNS namespace and "www.example.com".
        let dns = UUID(uuidString: "6ba7b810-9dad-11d1-80b4-00c04fd430c8")!
        #expect(
            UUID.nameBased(namespace: dns, name: "www.example.com").uuidString.lowercased()
                == "2ed6657d-e927-568b-95e1-2665a8aea6a2"
        )
        let settings = ObjectID.deterministic(entity: "Settings", name: "default")
        #expect(settings == ObjectID.deterministic(entity: "Settings", name: "default"))
        #expect(settings != ObjectID.deterministic(entity: "Settings", name: "other"))
        #expect(settings.uuid != ObjectID.deterministic(entity: "Folder", name: "default").uuid)
        #expect(ObjectID.random(entity: "Note") != ObjectID.random(entity: "Note"))
    }

    @Test("Records get defaults, and validation lists every violation with object, property and rule")
    func recordValidation() throws {
        let schema = try Self.notesSchema()
        var note = Record.new(schema.entity("Note")!)
        #expect(note["pinned"] == .boolean(false))
        let violations = schema.violations(of: note)
        #expect(
            Set(violations.map { "\($0.property):\($0.rule.rawValue)" }) == [
                "title:missingRequiredValue", "folder:missingRequiredRelationship",
            ]
        )
        #expect(violations.allSatisfy { $0.object == note.id })
        note["title"] = .integer(3)
        note.toOne["folder"] = ObjectID.random(entity: "Note")
        note["colour"] = .string("red")
        #expect(
            Set(schema.violations(of: note).map { "\($0.property):\($0.rule.rawValue)" }) == [
                "title:wrongType", "folder:wrongDestination", "colour:unknownProperty",
            ]
        )
        note["title"] = .string("Groceries")
        note["colour"] = .null
        note.toOne["folder"] = ObjectID.deterministic(entity: "Folder", name: "Inbox")
        #expect(schema.violations(of: note).isEmpty)
    }

    @Test("Records and schemas round-trip through JSON exactly, dates to the nanosecond they carry")
    func codableRoundTrip() throws {
        let schema = try Self.notesSchema()
        var note = Record.new(schema.entity("Note")!)
        note["title"] = .string("ünïcödé")
        note["edited"] = .date(Date(timeIntervalSince1970: 1_795_000_000.123456))
        note.toOne["folder"] = ObjectID.deterministic(entity: "Folder", name: "Inbox")
        let decoded = try JSONDecoder().decode(Record.self, from: JSONEncoder().encode(note))
        #expect(decoded == note)
        #expect(try JSONDecoder().decode(Schema.self, from: JSONEncoder().encode(schema)) == schema)
    }

    @Test("A schema read from a file is checked like one built in code")
    func decodedSchemaIsValidated() throws {
        let broken = Data(
            #"{"version":1,"entities":[{"name":"A","attributes":[],"relationships":[{"name":"b","destination":"B","inverse":"a","isToMany":false,"isOptional":true,"deleteRule":"nullify"}]}]}"#
                .utf8
        )
        #expect(throws: SchemaError.self) { try JSONDecoder().decode(Schema.self, from: broken) }
    }

    @Test("Ids order by entity, then by the UUID's bytes, the same on every device")
    func idOrder() {
        let low = ObjectID(entity: "Note", uuid: UUID(uuidString: "00000000-0000-0000-0000-0000000000ff")!)
        let high = ObjectID(entity: "Note", uuid: UUID(uuidString: "0f000000-0000-0000-0000-000000000000")!)
        #expect(low < high && !(high < low))
        #expect(ObjectID(entity: "A", uuid: high.uuid) < ObjectID(entity: "B", uuid: low.uuid))
    }

    @Test("An id's text is the entity and the UUID's canonical lowercase form")
    func idText() {
        let fixed = ObjectID(entity: "Note", uuid: UUID(uuidString: "09AF0000-00FF-4A5B-8C9D-F0E1D2C3B4A5")!)
        #expect(fixed.description == "Note/09af0000-00ff-4a5b-8c9d-f0e1d2c3b4a5")
        for _ in 0..<200 {
            let id = ObjectID.random(entity: "Tag")
            #expect(id.description == "Tag/" + id.uuid.uuidString.lowercased())
        }
    }
}
