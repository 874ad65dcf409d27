import ConcordTestSupport
import Foundation
import Persistence
import Synchronization
import Testing

/// A note, as an app would declare it.
struct Note: Entity, Equatable {
    enum Priority: String, Codable { case low, normal, high }
    static let entityName = "Note"
    var id = Note.newID()
    var title: String
    var pinned = false
    var edited: Date?
    var priority: Priority = .normal
    var folder: ObjectID?
    var tags: Set<ObjectID> = []
}

@Suite("Object contexts")
struct ObjectContextTests {
    static let schema = try! Schema(
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
                    AttributeDescription("title", .string, isIndexed: true),
                    AttributeDescription("pinned", .boolean, defaultValue: false),
                    AttributeDescription("edited", .date, isOptional: true),
                    AttributeDescription("priority", .string, defaultValue: "normal"),
                ],
                relationships: [
                    RelationshipDescription("folder", to: "Folder", inverse: "notes"),
                    RelationshipDescription("tags", to: "Tag", inverse: "notes", isToMany: true),
                ]
            ),
            EntityDescription(
                "Tag",
                attributes: [AttributeDescription("label", .string)],
                relationships: [
                    RelationshipDescription("notes", to: "Note", inverse: "tags", isToMany: true, deleteRule: .deny)
                ]
            ),
        ]
    )

    /// A coordinator with one snapshot store in a fresh directory.
    struct Fixture {
        let directory = TemporaryDirectory("context")
        let registry = StoreRegistry()
        let coordinator: StoreCoordinator
        let store: any PersistentStore

        init(schema: Schema = ObjectContextTests.schema) throws {
            registry.register(SnapshotStore.self)
            coordinator = StoreCoordinator(schema: schema, registry: registry)
            store = try coordinator.addStore(ofType: "snapshot", at: directory("store.json"))
        }

        func context(_ origin: ChangeOrigin = .local) -> ObjectContext {
            ObjectContext(coordinator: coordinator, origin: origin)
        }
    }

    @Test("Inserts, updates and deletes are visible to fetches before and after the save")
    func unsavedChangesAreFetched() throws {
        let fixture = try Fixture()
        let context = fixture.context()
        let a = try context.insert(entity: "Note", values: ["title": "alpha"])
        let b = try context.insert(entity: "Note", values: ["title": "beta"])
        #expect(a["pinned"] == false)
        try context.save()
        #expect(try fixture.store.count(for: FetchRequest(entity: "Note")) == 2)

        var changedB = try #require(try context.record(with: b.id))
        changedB["title"] = "aardvark"
        try context.update(changedB)
        try context.delete(a.id)
        try context.insert(entity: "Note", values: ["title": "gamma"])
        let titles = try context.fetch(FetchRequest(entity: "Note", sortedBy: [.ascending("title")])).map {
            $0["title"]
        }
        #expect(titles == ["aardvark", "gamma"])
        #expect(try context.count(for: FetchRequest(entity: "Note", predicate: Field("title").beginsWith("a"))) == 1)
        // The store still has the saved state.
        #expect(
            try fixture.store.fetch(FetchRequest(entity: "Note", sortedBy: [.ascending("title")])).map { $0["title"] }
                == ["alpha", "beta"]
        )

        try context.save()
        #expect(!context.hasChanges)
        let stored = try fixture.store.fetch(FetchRequest(entity: "Note", sortedBy: [.ascending("title")])).map {
            $0["title"]
        }
        #expect(stored == ["aardvark", "gamma"])
    }

    @Test("Fetches over unsaved changes match the in-memory evaluation, pages included", arguments: [1, 2, 3])
    func mergedFetchesArePaged(seed: UInt64) throws {
        let fixture = try Fixture()
        let context = fixture.context()
        var random = SeededRandom(seed: seed)
        for index in 0..<60 {
            try context.insert(
                entity: "Note",
                values: ["title": .string("n\(random.next() % 20)"), "pinned": .boolean(index % 3 == 0)]
            )
        }
        try context.save()
        // Unsaved: some updated, some deleted, some inserted.
        let all = try context.fetch(FetchRequest(entity: "Note"))
        for record in all where random.next() % 4 == 0 {
            var changed = record
            changed["title"] = .string("n\(random.next() % 20)")
            try context.update(changed)
        }
        for record in all where random.next() % 5 == 0 { try context.delete(record.id) }
        for _ in 0..<10 { try context.insert(entity: "Note", values: ["title": .string("n\(random.next() % 20)")]) }

        let everything = try context.fetch(FetchRequest(entity: "Note"))
        for offset in [0, 5, 17] {
            for limit in [nil, 1, 7, 100] as [Int?] {
                let request = FetchRequest(
                    entity: "Note",
                    predicate: Field("title") >= "n1" && Field("pinned") == false,
                    sortedBy: [.descending("title")],
                    limit: limit,
                    offset: offset
                )
                #expect(try context.fetch(request) == request.evaluate(over: everything))
                #expect(try context.count(for: request) == everything.filter(request.matches).count)
            }
        }
    }

    @Test("Both sides of a relationship stay consistent; delete rules apply")
    func relationships() throws {
        let fixture = try Fixture()
        let context = fixture.context()
        let inbox = try context.insert(entity: "Folder", values: ["name": "Inbox"])
        let archive = try context.insert(entity: "Folder", values: ["name": "Archive"])
        var note = try context.insert(entity: "Note", values: ["title": "milk"])
        note.toOne["folder"] = inbox.id
        try context.update(note)
        #expect(try context.record(with: inbox.id)?.toMany["notes"] == [note.id])

        // Moving the note from the to-many side re-parents it and empties the old folder.
        var archived = try #require(try context.record(with: archive.id))
        archived.toMany["notes"] = [note.id]
        try context.update(archived)
        #expect(try context.record(with: note.id)?.toOne["folder"] == archive.id)
        #expect(try context.record(with: inbox.id)?.toMany["notes"] == nil)
        try context.save()

        // Tags deny deletion while they hold notes; nullify clears the note's side.
        let tag = try context.insert(entity: "Tag", values: ["label": "errands"])
        note = try #require(try context.record(with: note.id))
        note.toMany["tags"] = [tag.id]
        try context.update(note)
        #expect {
            try context.delete(tag.id)
        } throws: { ($0 as? PersistenceError)?.code == .deleteDenied }
        try context.save()

        // Deleting the folder cascades to its notes, and the tag forgets them.
        try context.delete(archive.id)
        #expect(try context.record(with: note.id) == nil)
        #expect(try context.record(with: tag.id)?.toMany["tags"] == nil)
        #expect(try context.record(with: tag.id)?.toMany["notes"] == nil)
        try context.save()
        #expect(try fixture.store.count(for: FetchRequest(entity: "Note")) == 0)
        #expect(try fixture.store.records(with: [tag.id]).first?.toMany["notes"] == nil)
        try context.delete(tag.id)
        try context.save()
    }

    @Test("A save that breaks the rules commits nothing and lists every violation")
    func validationFailure() throws {
        let fixture = try Fixture()
        let context = fixture.context()
        let note = try context.insert(entity: "Note", values: ["pinned": true])  // no title
        var dangling = note
        dangling.toOne["folder"] = .random(entity: "Folder")
        try context.update(dangling)
        let error = try #require(throws: PersistenceError.self) { try context.save() }
        #expect(error.code == .validationFailed)
        #expect(Set(error.violations.map(\.rule)) == [.missingRequiredValue, .missingDestination])
        #expect(error.violations.allSatisfy { $0.object == note.id })
        #expect(try fixture.store.count(for: FetchRequest(entity: "Note")) == 0)
        #expect(context.hasChanges)
    }

    @Test("Import contexts defer validation to the next local save")
    func importDefersValidation() throws {
        let fixture = try Fixture()
        let importer = fixture.context(.import)
        let note = try importer.insert(entity: "Note", values: [:])  // title missing: invalid
        try importer.save()
        #expect(try fixture.store.count(for: FetchRequest(entity: "Note")) == 1)

        // The next local save validates what the import changed, with its own changes.
        let local = fixture.context()
        local.validationRepairer = nil
        try local.insert(entity: "Folder", values: ["name": "x"])
        let error = try #require(throws: PersistenceError.self) { try local.save() }
        #expect(error.violations.map(\.object) == [note.id] && error.violations.first?.rule == .missingRequiredValue)
        var fixed = try #require(try local.record(with: note.id))
        fixed["title"] = "named"
        try local.update(fixed)
        try local.save()
        // Once validated, the list is cleared: later saves do not look at the note again.
        try local.insert(entity: "Folder", values: ["name": "y"])
        try local.save()
    }

    final class Counter: Sendable {
        let value = Mutex(0)
    }

    final class Origins: Sendable {
        let value = Mutex<[ChangeOrigin]>([])
    }

    struct FillTitles: ValidationRepairing {
        let calls = Counter()
        let fixes: Bool
        func repair(_ violations: [ValidationViolation], in context: ObjectContext) throws -> Bool {
            calls.value.withLock { $0 += 1 }
            guard fixes else { return true }
            for violation in violations where violation.property == "title" {
                var record = try #require(try context.record(with: violation.object))
                record["title"] = "untitled"
                try context.update(record)
            }
            return true
        }
    }

    @Test("The repair seam: a repairer fixes the save, or the save fails after the bound")
    func repairSeam() throws {
        let fixture = try Fixture()
        let context = fixture.context()
        context.validationRepairer = FillTitles(fixes: true)
        let note = try context.insert(entity: "Note")
        try context.save()
        #expect(try fixture.store.records(with: [note.id]).first?["title"] == "untitled")

        let stubborn = FillTitles(fixes: false)
        context.validationRepairer = stubborn
        context.maximumRepairPasses = 4
        try context.insert(entity: "Note")
        let error = try #require(throws: PersistenceError.self) { try context.save() }
        #expect(error.code == .validationFailed && error.violations.count == 1)
        #expect(stubborn.calls.value.withLock { $0 } == 4)
    }

    struct StampHooks: EntityHooks {
        let entityName = "Note"
        let seen = Origins()
        func didInsert(_ record: inout Record, origin: ChangeOrigin, context: ObjectContext) throws {
            seen.value.withLock { $0.append(origin) }
            // A side effect for local edits only: imported notes already carry theirs.
            if origin == .local, record["title"] == .null { record["title"] = "new note" }
        }
        func willSave(
            _ record: inout Record,
            change: RecordChangeKind,
            origin: ChangeOrigin,
            context: ObjectContext
        ) throws {
            if origin == .local { record["edited"] = .date(Date(timeIntervalSinceReferenceDate: 1000)) }
        }
    }

    @Test("Hooks are told the origin")
    func hooksSeeTheOrigin() throws {
        let fixture = try Fixture()
        let hooks = StampHooks()
        let local = ObjectContext(coordinator: fixture.coordinator, origin: .local, hooks: [hooks])
        let mine = try local.insert(entity: "Note")
        try local.save()
        let importer = ObjectContext(coordinator: fixture.coordinator, origin: .import, hooks: [hooks])
        let theirs = try importer.insert(entity: "Note", values: ["title": "from elsewhere"])
        try importer.save()
        #expect(hooks.seen.value.withLock { $0 } == [.local, .import])
        let stored = try fixture.store.records(with: [mine.id, theirs.id]).sorted {
            $0.id == mine.id && $1.id != mine.id
        }
        #expect(
            stored[0]["title"] == "new note" && stored[0]["edited"] == .date(Date(timeIntervalSinceReferenceDate: 1000))
        )
        #expect(stored[1]["title"] == "from elsewhere" && stored[1]["edited"] == .null)
    }

    @Test("A save publishes its change set: AsyncSequence, coordinator listeners, NotificationCenter")
    func changeSetsArePublished() async throws {
        let fixture = try Fixture()
        let context = fixture.context()
        context.name = "editor"
        let saves = context.changeSets()
        let coordinatorSaves = fixture.coordinator.changeSets()
        let posted = Mutex<[ChangeSet]>([])
        let observer = NotificationCenter.default.addObserver(
            forName: .concordContextDidSave,
            object: context,
            queue: nil
        ) { note in
            if let changes = note.userInfo?["changes"] as? ChangeSet { posted.withLock { $0.append(changes) } }
        }
        defer { NotificationCenter.default.removeObserver(observer) }

        let note = try context.insert(entity: "Note", values: ["title": "one"])
        try context.save()
        var changed = try #require(try context.record(with: note.id))
        changed["pinned"] = true
        try context.update(changed)
        try context.save()
        try context.delete(note.id)
        try context.save()

        var received: [ChangeSet] = []
        for await changes in saves {
            received.append(changes)
            if received.count == 3 { break }
        }
        #expect(
            received[0].inserted.map(\.id) == [note.id] && received[0].origin == .local
                && received[0].contextName == "editor"
        )
        #expect(received[1].updatedKeys == [note.id: ["pinned"]] && received[1].updated.first?["pinned"] == true)
        #expect(received[2].deleted == [note.id])
        var fromCoordinator = 0
        for await _ in coordinatorSaves {
            fromCoordinator += 1
            if fromCoordinator == 3 { break }
        }
        #expect(posted.withLock { $0 } == received)
    }

    @Test("Two contexts changing different properties of one record both keep theirs")
    func propertyLevelUpdates() throws {
        let fixture = try Fixture()
        let first = fixture.context()
        let note = try first.insert(entity: "Note", values: ["title": "draft"])
        try first.save()
        let second = fixture.context()
        var a = try #require(try first.record(with: note.id))
        var b = try #require(try second.record(with: note.id))
        a["title"] = "final"
        b["pinned"] = true
        try first.update(a)
        try second.update(b)
        try first.save()
        try second.save()
        let stored = try #require(try fixture.store.records(with: [note.id]).first)
        #expect(stored["title"] == "final" && stored["pinned"] == true)
    }

    @Test("Swift types map to records through Codable")
    func typedEntities() throws {
        let fixture = try Fixture()
        let context = fixture.context()
        let folder = try context.insert(entity: "Folder", values: ["name": "Inbox"])
        let edited = Date(timeIntervalSinceReferenceDate: 812_345_678.123456)
        let note = try context.insert(Note(title: "typed", edited: edited, priority: .high, folder: folder.id))
        try context.save()
        #expect(try context.record(with: folder.id)?.toMany["notes"] == [note.id])
        let fetched = try context.fetch(Note.self, where: Field("priority") == "high")
        #expect(fetched == [note])
        #expect(try context.object(Note.self, id: note.id)?.edited == edited)

        var renamed = note
        renamed.title = "retitled"
        renamed.folder = nil
        try context.update(renamed)
        try context.save()
        #expect(try context.object(Note.self, id: note.id)?.folder == nil)
        #expect(try context.record(with: folder.id)?.toMany["notes"] == nil)

        // A record that does not fit the type is a typed error naming the property.
        let broken = try context.insert(entity: "Note", values: ["title": "x", "priority": "urgent"])
        let error = try #require(throws: PersistenceError.self) { try context.object(Note.self, id: broken.id) }
        #expect(error.code == .invalidRequest && error.message.contains("Note"))
    }

    @Test("Metadata entries commit with the data of the same save")
    func metadataCommitsWithData() throws {
        let fixture = try Fixture()
        let context = fixture.context()
        try context.insert(entity: "Folder", values: ["name": "x"])
        context.setMetadata(Data("cursor-7".utf8), forKey: "sync.cursor", in: fixture.store)
        try context.save()
        #expect(try fixture.store.metadata().entries["sync.cursor"] == Data("cursor-7".utf8))
        context.setMetadata(nil, forKey: "sync.cursor", in: fixture.store)
        try context.save()
        #expect(try fixture.store.metadata().entries["sync.cursor"] == nil)
    }

    @Test("Prefetched records serve lookups, present or absent, until the context saves")
    func prefetchServesLookupsUntilSave() throws {
        let fixture = try Fixture()
        let writer = fixture.context()
        let kept = try writer.insert(entity: "Folder", values: ["name": "kept"])
        let gone = try writer.insert(entity: "Folder", values: ["name": "gone"])
        try writer.save()
        let absent = ObjectID.random(entity: "Folder")

        let context = fixture.context(.import)
        try context.prefetch([kept.id, gone.id, absent, ObjectID.random(entity: "NoSuchEntity")])
        // Another writer changes all three after the read; the prefetching context goes on
        // with what its read found.
        try writer.delete(gone.id)
        try writer.insert(Record(id: absent, values: ["name": "late"]))
        var renamed = try #require(try writer.record(with: kept.id))
        renamed["name"] = "renamed elsewhere"
        try writer.update(renamed)
        try writer.save()
        #expect(try context.record(with: kept.id)?["name"] == "kept")
        #expect(try context.record(with: gone.id)?["name"] == "gone")
        #expect(try context.record(with: absent) == nil)

        // An update compares with the prefetched version: one that leaves the name as that
        // version had it commits nothing, so the other writer's rename is not undone.
        var tagged = try #require(try context.record(with: kept.id))
        tagged["name"] = "kept"
        try context.update(tagged)
        try context.insert(entity: "Folder", values: ["name": "new"])
        try context.save()
        #expect(try fixture.store.records(with: [kept.id]).first?["name"] == "renamed elsewhere")
        // After the save, lookups read the store again.
        #expect(try context.record(with: absent)?["name"] == "late")
        #expect(try context.record(with: gone.id) == nil)
    }

    @Test("A store whose file is deleted is dropped, and its contexts are told")
    func storeRemovalReachesContexts() async throws {
        let fixture = try Fixture()
        let context = fixture.context()
        let events = context.events()
        try context.insert(entity: "Folder", values: ["name": "x"])
        try FileManager.default.removeItem(at: fixture.store.url)
        var removed = false
        for await event in events {
            if case .storeDidChange(let storeEvent) = event, storeEvent.kind == .removed {
                removed = true
                break
            }
        }
        #expect(removed)
        #expect(fixture.coordinator.stores.isEmpty)
        let error = try #require(throws: PersistenceError.self) { try context.fetch(FetchRequest(entity: "Folder")) }
        #expect(error.code == .noStore)
        #expect(!context.hasChanges)
        #expect(throws: PersistenceError.self) { try fixture.store.fetch(FetchRequest(entity: "Folder")) }
    }
}

/// A small deterministic generator (SplitMix64) for reproducible test data.
struct SeededRandom {
    var state: UInt64
    init(seed: UInt64) { state = seed }
    mutating func next() -> UInt64 {
        state &+= 0x9E37_79B9_7F4A_7C15
        var z = state
        z = (z ^ (z >> 30)) &* 0xBF58_476D_1CE4_E5B9
        z = (z ^ (z >> 27)) &* 0x94D0_49BB_1331_11EB
        return z ^ (z >> 31)
    }
}
