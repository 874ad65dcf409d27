import Foundation
import Persistence
import StoreConformance
import Testing

@testable import FolderStore

/// What a crash in the middle of a commit leaves, and how the store recovers: once the journal
/// is in place the commit happens; before, it does not.
@Suite("FolderStore journal")
struct FolderStoreJournalTests {
    let folder = URL(fileURLWithPath: NSTemporaryDirectory()).appendingPathComponent(
        "folderstore-journal-\(UUID().uuidString)"
    )

    func item(_ name: String) -> Record {
        Record(id: .deterministic(entity: "Item", name: name), values: ["title": .string(name)])
    }

    func titles(_ store: FolderStore) throws -> [String] {
        try store.fetch(FetchRequest(entity: "Item", sortedBy: [.ascending("title")])).map { record in
            if case .string(let title) = record["title"] { return title } else { return "?" }
        }
    }

    @Test(
        "a journal left by a crash is applied: in memory by a read-only store, on disk by the next writer; a stray temporary file is ignored"
    )
    func interruptedCommitCompletes() throws {
        try FileManager.default.createDirectory(at: folder, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(at: folder) }
        let url = folder.appendingPathComponent("store.folder")
        let layout = FolderLayout(url)
        let options = StoreOptions(presentsFiles: false)
        let store = try FolderStore(url: url, schema: ConformanceSchema.v1, options: options)
        try store.commit(StoreChanges(inserts: [item("kept"), item("removed")], metadataEntries: ["step": Data([1])]))
        store.close()

        // The crash: the next commit's journal is durable, none of its other writes happened,
        // and a temporary file of an interrupted write lies beside the records.
        var manifest = try Manifest.decode(try Data(contentsOf: url), url: url)
        manifest.generation = UUID()
        manifest.metadata.entries["step"] = Data([2])
        let journal = Journal(manifest: manifest, writes: [item("added")], removals: [item("removed").id])
        try FolderLayout.encode(journal).write(to: layout.journal)
        try Data("torn".utf8).write(to: layout.folder.appendingPathComponent(".Item.x.json.123.concord-tmp"))
        let before = try FileManager.default.contentsOfDirectory(atPath: layout.folder.path).sorted()

        let reader = try FolderStore(
            url: url,
            schema: ConformanceSchema.v1,
            options: StoreOptions(isReadOnly: true, presentsFiles: false)
        )
        #expect(try titles(reader) == ["added", "kept"], "the read-only store sees the journaled commit")
        #expect(try reader.metadata().entries["step"] == Data([2]))
        reader.close()
        #expect(
            try FileManager.default.contentsOfDirectory(atPath: layout.folder.path).sorted() == before,
            "a read-only store writes nothing"
        )

        let writer = try FolderStore(url: url, schema: ConformanceSchema.v1, options: options)
        #expect(try titles(writer) == ["added", "kept"])
        writer.close()
        #expect(
            !FileManager.default.fileExists(atPath: layout.journal.path),
            "the writer applied the journal and removed it"
        )
        #expect(!FileManager.default.fileExists(atPath: layout.file(of: item("removed").id).path))
        #expect(FileManager.default.fileExists(atPath: layout.file(of: item("added").id).path))

        let reopened = try FolderStore(url: url, schema: ConformanceSchema.v1, options: options)
        #expect(try titles(reopened) == ["added", "kept"])
        #expect(try reopened.metadata().entries["step"] == Data([2]))
        reopened.close()
    }

    @Test("a damaged record file fails the open with corruptStore naming that file, and nothing is written")
    func damagedRecordNamed() throws {
        try FileManager.default.createDirectory(at: folder, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(at: folder) }
        let url = folder.appendingPathComponent("store.folder")
        let store = try FolderStore(url: url, schema: ConformanceSchema.v1, options: StoreOptions(presentsFiles: false))
        try store.commit(StoreChanges(inserts: [item("one")]))
        store.close()
        let file = FolderLayout(url).file(of: item("one").id)
        try Data("{ \"id\": ".utf8).write(to: file)
        do {
            _ = try FolderStore(url: url, schema: ConformanceSchema.v1, options: StoreOptions(presentsFiles: false))
            Issue.record("a damaged record file opened")
        } catch let error as PersistenceError {
            #expect(error.code == .corruptStore && error.url == file, "\(error)")
        }
        #expect(try Data(contentsOf: file) == Data("{ \"id\": ".utf8))
    }
}
