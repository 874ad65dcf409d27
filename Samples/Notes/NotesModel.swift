import Foundation
import Persistence

/// The Notes data model: its schema, its entity policies, and how its records read as text.
enum NotesModel {
    /// Folders hold notes; a folder that still has notes cannot be deleted (`.deny`), so on one
    /// device a note never loses its folder. Across devices it can: one device deletes an empty
    /// folder while another files a new note into it. ``FolderRepair`` mends that.
    static let schema: Schema = {
        do {
            return try Schema(
                version: 1,
                entities: [
                    EntityDescription(
                        "Folder",
                        attributes: [
                            AttributeDescription("name", .string, isIndexed: true),
                            AttributeDescription("created", .date),
                        ],
                        relationships: [
                            RelationshipDescription(
                                "notes",
                                to: "Note",
                                inverse: "folder",
                                isToMany: true,
                                deleteRule: .deny
                            )
                        ]
                    ),
                    EntityDescription(
                        "Note",
                        attributes: [
                            AttributeDescription("title", .string, isIndexed: true),
                            AttributeDescription("body", .string, defaultValue: .string("")),
                            AttributeDescription("created", .date),
                            AttributeDescription("edited", .date, isIndexed: true),
                            AttributeDescription("pinned", .boolean, defaultValue: .boolean(false)),
                        ],
                        relationships: [
                            RelationshipDescription("folder", to: "Folder", inverse: "notes", isOptional: false),
                            RelationshipDescription("tags", to: "Tag", inverse: "notes", isToMany: true),
                        ]
                    ),
                    EntityDescription(
                        "Tag",
                        attributes: [AttributeDescription("label", .string, isIndexed: true)],
                        relationships: [RelationshipDescription("notes", to: "Note", inverse: "tags", isToMany: true)]
                    ),
                    EntityDescription(
                        "Settings",
                        attributes: [
                            AttributeDescription(
                                "sortOrder",
                                .string,
                                defaultValue: .string(SortOrder.edited.rawValue)
                            ),
                            AttributeDescription("theme", .string, defaultValue: .string("light")),
                            AttributeDescription("created", .date),
                            AttributeDescription("createdOn", .string, isOptional: true),
                        ]
                    ),
                ]
            )
        } catch {
            fatalError("the Notes schema is invalid: \(error)")
        }
    }()

    /// The folder every device has, with the same id everywhere, and where notes whose folder
    /// was deleted on another device are moved.
    static let inboxID = ObjectID.deterministic(entity: "Folder", name: "Inbox")
    static let inboxName = "Inbox"

    /// Registers the policies on `coordinator`: one Settings record (the one created first wins
    /// on every device), one tag per label, one folder per name, and repairs for what a merge of
    /// two devices' edits can leave invalid.
    static func registerPolicies(on coordinator: StoreCoordinator) {
        coordinator.policies.register(Deduplicate("Settings", .singleton, stampedBy: "created"))
        coordinator.policies.register(Deduplicate("Tag", .key(["label"])))
        coordinator.policies.register(Deduplicate("Folder", .key(["name"]), stampedBy: "created"))
        coordinator.policies.register(FolderRepair())
        coordinator.policies.register(ClearMissingReferences("Folder"))
        coordinator.policies.register(ClearMissingReferences("Tag"))
    }

    /// How `list` orders notes (pinned notes always come first).
    enum SortOrder: String, CaseIterable {
        case edited, title, created
    }
}

/// Repairs a note whose folder is gone (deleted on another device while this one filed the
/// note into it): the note moves to the Inbox, which is created if needed. Tags that were deleted
/// are dropped. A folder or tag that has not arrived yet is left alone: it may still come. The
/// repair is a local edit, so it syncs like any other.
struct FolderRepair: ValidationRepairPolicy {
    let entityName = "Note"

    func repair(_ note: Record, violations: [ValidationViolation], in context: ObjectContext) throws -> Bool {
        var note = note
        var changed = false
        // A folder or tag that has not arrived yet may still come: only deleted ones are repaired.
        let properties = Set(violations.filter { $0.targetState != .notArrived }.map(\.property))
        if properties.contains("folder") {
            // The violation says the folder is gone (this context may still hold a copy it read
            // before another process's import removed it).
            let gone = violations.contains { $0.property == "folder" && $0.rule == .missingDestination }
            let folder = note.toOne["folder"]
            if try gone || folder.flatMap({ try context.record(with: $0) }) == nil {
                if try context.record(with: NotesModel.inboxID) == nil {
                    try context.insert(NotesModel.newInbox())
                }
                note.toOne["folder"] = NotesModel.inboxID
                changed = true
            }
        }
        if properties.contains("tags"), let tags = note.toMany["tags"] {
            var kept = Set<ObjectID>()
            for tag in tags where try context.record(with: tag) != nil { kept.insert(tag) }
            if kept != tags {
                note.toMany["tags"] = kept.isEmpty ? nil : kept
                changed = true
            }
        }
        if changed { try context.update(note) }
        return changed
    }
}

extension NotesModel {
    /// The Inbox as every device creates it: the same id and values everywhere, so two devices
    /// creating it make one record.
    static func newInbox() -> Record {
        Record(id: inboxID, values: ["name": .string(inboxName), "created": .date(Date(timeIntervalSince1970: 0))])
    }

    // MARK: Text

    /// The short form of an id that the commands print and accept: the first 8 hex digits.
    static func shortID(_ id: ObjectID) -> String {
        String(id.uuid.uuidString.lowercased().prefix(8))
    }

    /// A string value, quoted with `\"`, `\\`, `\n` and `\t` escaped, so a line stays one line.
    static func quoted(_ text: String) -> String {
        var result = "\""
        for character in text {
            switch character {
            case "\"": result += "\\\""
            case "\\": result += "\\\\"
            case "\n": result += "\\n"
            case "\t": result += "\\t"
            default: result.append(character)
            }
        }
        return result + "\""
    }

    static func string(_ value: Value) -> String {
        if case .string(let text) = value { return text }
        return ""
    }

    static func date(_ value: Value) -> Date? {
        if case .date(let date) = value { return date }
        return nil
    }

    static func timestamp(_ value: Value) -> String {
        guard let date = date(value) else { return "-" }
        return Date.ISO8601FormatStyle(includingFractionalSeconds: true).format(date)
    }

    /// `note ID folder="F" pinned=yes|no tags=[a,b] title="T" body="B"`; `folderName` and
    /// `tagLabels` resolve the note's references (a missing folder prints as `?`).
    static func describeNote(_ note: Record, folderName: String?, tagLabels: [String]) -> String {
        let pinned = note["pinned"] == .boolean(true) ? "yes" : "no"
        return "note \(shortID(note.id)) folder=\(quoted(folderName ?? "?")) pinned=\(pinned) "
            + "tags=[\(tagLabels.sorted().joined(separator: ","))] title=\(quoted(string(note["title"]))) "
            + "body=\(quoted(string(note["body"])))"
    }

    /// `settings ID theme=T sort=S created-on=DEVICE created=DATE`.
    static func describeSettings(_ settings: Record) -> String {
        let device = settings["createdOn"] == .null ? "?" : string(settings["createdOn"])
        return
            "settings \(shortID(settings.id)) theme=\(string(settings["theme"])) sort=\(string(settings["sortOrder"])) "
            + "created-on=\(device) created=\(timestamp(settings["created"]))"
    }
}
