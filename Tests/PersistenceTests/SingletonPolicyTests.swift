import Foundation
import Persistence
import Testing

@Suite("Singletons")
struct SingletonPolicyTests {
    static let schema = try! Schema(
        version: 1,
        entities: [
            EntityDescription(
                "Settings",
                attributes: [
                    AttributeDescription("theme", .string, defaultValue: "light"),
                    AttributeDescription("created", .date),
                ],
                relationships: [
                    RelationshipDescription("favorites", to: "Folder", inverse: "favoredBy", isToMany: true)
                ]
            ),
            EntityDescription(
                "Folder",
                attributes: [AttributeDescription("name", .string)],
                relationships: [RelationshipDescription("favoredBy", to: "Settings", inverse: "favorites")]
            ),
        ]
    )

    static func device(_ name: String) throws -> Device {
        try Device(name, schema: schema, uniqueness: [Deduplicate("Settings", .singleton, stampedBy: "created")])
    }

    /// Each device creates "its" settings object with a favorite folder.
    static func createSettings(on device: Device, theme: String, created: Double, folder: String) throws {
        let context = device.context()
        let favorite = try context.insert(entity: "Folder", values: ["name": .string(folder)])
        var settings = try context.insert(
            entity: "Settings",
            values: [
                "theme": .string(theme), "created": .date(Date(timeIntervalSinceReferenceDate: created)),
            ]
        )
        settings.toMany["favorites"] = [favorite.id]
        try context.update(settings)
        try context.save()
    }

    @Test(
        "A singleton created on two devices becomes one, the same one everywhere, in either order",
        arguments: [false, true]
    )
    func singletonConverges(reversed: Bool) throws {
        let one = try Self.device("one")
        let two = try Self.device("two")
        try Self.createSettings(on: one, theme: "dark", created: 500, folder: "Inbox")
        try Self.createSettings(on: two, theme: "sepia", created: 700, folder: "Work")
        let (first, second) = reversed ? (two, one) : (one, two)
        let firstData = try first.contents()
        let secondData = try second.contents()
        try first.importRecords(secondData)
        try second.importRecords(firstData)

        let a = try one.contents()
        #expect(a == (try two.contents()))
        let settings = a.filter { $0.id.entity == "Settings" }
        #expect(settings.count == 1)
        // The earliest wins and keeps its values; the loser's favorites moved to it.
        #expect(settings[0]["theme"] == "dark")
        let folders = a.filter { $0.id.entity == "Folder" }
        #expect(settings[0].toMany["favorites"] == Set(folders.map(\.id)))
        #expect(folders.allSatisfy { $0.toOne["favoredBy"] == settings[0].id })
    }

    @Test("A deterministic id makes creating the default settings idempotent across devices")
    func deterministicIDs() throws {
        let one = try Self.device("one")
        let two = try Self.device("two")
        let id = ObjectID.deterministic(entity: "Settings", name: "default")
        for device in [one, two] {
            let context = device.context()
            if try context.record(with: id) == nil {
                try context.insert(
                    entity: "Settings",
                    id: id,
                    values: ["created": .date(Date(timeIntervalSinceReferenceDate: 1))]
                )
            }
            try context.save()
        }
        try one.importRecords(try two.contents())
        try two.importRecords(try one.contents())
        #expect(try one.contents().map(\.id) == [id])
        #expect(try two.contents() == one.contents())
    }
}
